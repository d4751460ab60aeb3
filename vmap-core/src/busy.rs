//! The busy index: where a space keeps its allocated areas by address
//! (Linux's `vmap_area_root`). A policy names its index
//! ([`Search::Busy`](crate::policy::Search::Busy)): the AVL tree of
//! [`BusyTree`] beside a policy's own free index, or, for
//! `Blocks` (feature `alloc`), the one B+tree whose gaps are the free blocks.
//!
//! Every busy area is a node of the space's [`NodeArena`] (its `start`,
//! `end` and `parked` flag); the index finds those nodes by address.

use crate::error::VmapError;
use crate::node::{NodeArena, NodeIdx};
use crate::policy::BusyTree;

/// The operations a space needs of its busy index (public in a private
/// module, as [`Search`](crate::policy::Search): not nameable outside the
/// crate).
pub trait BusyIndex: Sized + Send + Sync {
    /// An empty index for the space `[start, end)` (already checked).
    fn new(start: u64, end: u64, page_size: u64) -> Result<Self, VmapError>;

    /// Areas linked in.
    fn len(&self) -> usize;

    /// Links busy node `n` (range set, free in the index until now). Fails
    /// only for lack of memory, with nothing changed.
    fn insert<S: NodeArena>(&mut self, s: &mut S, n: NodeIdx) -> Result<(), VmapError>;

    /// [`insert`](Self::insert) when `pred`, the busy area just below `n`
    /// (`NIL`: none), is known.
    #[inline]
    fn insert_after<S: NodeArena>(
        &mut self,
        s: &mut S,
        _pred: NodeIdx,
        n: NodeIdx,
    ) -> Result<(), VmapError> {
        self.insert(s, n)
    }

    /// Makes sure the next [`insert`](Self::insert) cannot fail for lack
    /// of memory (a resize unlinks an area, then must be able to take its
    /// range back). An index whose inserts never fail has nothing to do.
    fn reserve_insert(&mut self) -> Result<(), VmapError> {
        Ok(())
    }

    /// Unlinks busy node `i` (its fields stay as they were).
    fn remove<S: NodeArena>(&mut self, s: &mut S, i: NodeIdx);

    /// [`remove`](Self::remove) in a run of removals in address order (a
    /// purge's batch): an index may keep its way to the area after `i`,
    /// which the next lookup is likely for.
    fn remove_in_run<S: NodeArena>(&mut self, s: &mut S, i: NodeIdx) {
        self.remove(s, i);
    }

    /// The lowest area, or `NIL`.
    fn first<S: NodeArena>(&self, s: &S) -> NodeIdx;

    /// The area after linked node `i`, or `NIL`.
    fn next<S: NodeArena>(&self, s: &S, i: NodeIdx) -> NodeIdx;

    /// The area before linked node `i`, or `NIL`.
    fn prev<S: NodeArena>(&self, s: &S, i: NodeIdx) -> NodeIdx;

    /// The area starting at `key`, or `NIL`; counts visited nodes.
    fn find_start<S: NodeArena>(&self, s: &S, key: u64, visited: &mut u32) -> NodeIdx;

    /// [`find_start`](Self::find_start) ahead of unlinking what it finds:
    /// an index may keep the way down for the [`remove`](Self::remove)
    /// that follows.
    #[inline]
    fn find_start_for_unlink<S: NodeArena>(
        &mut self,
        s: &S,
        key: u64,
        visited: &mut u32,
    ) -> NodeIdx {
        self.find_start(s, key, visited)
    }

    /// [`find_start_for_unlink`](Self::find_start_for_unlink) for the next
    /// address of a run (after [`remove_in_run`](Self::remove_in_run)): an
    /// index that kept its way to that area answers without a search. Only
    /// runs ask, so a lone free pays nothing for the check.
    fn find_start_in_run<S: NodeArena>(&mut self, s: &S, key: u64, visited: &mut u32) -> NodeIdx {
        self.find_start_for_unlink(s, key, visited)
    }

    /// The area with the largest start `<= addr`, or `NIL`.
    fn floor<S: NodeArena>(&self, s: &S, addr: u64, visited: &mut u32) -> NodeIdx;

    /// The index's own invariants; returns the number of areas.
    fn check<S: NodeArena>(&self, s: &S) -> Result<usize, &'static str>;
}

impl BusyIndex for BusyTree {
    fn new(_: u64, _: u64, _: u64) -> Result<Self, VmapError> {
        Ok(BusyTree::new())
    }
    #[inline]
    fn len(&self) -> usize {
        self.len
    }
    #[inline]
    fn insert<S: NodeArena>(&mut self, s: &mut S, n: NodeIdx) -> Result<(), VmapError> {
        BusyTree::insert(self, s, n);
        Ok(())
    }
    #[inline]
    fn insert_after<S: NodeArena>(
        &mut self,
        s: &mut S,
        pred: NodeIdx,
        n: NodeIdx,
    ) -> Result<(), VmapError> {
        BusyTree::insert_after(self, s, pred, n);
        Ok(())
    }
    #[inline]
    fn remove<S: NodeArena>(&mut self, s: &mut S, i: NodeIdx) {
        BusyTree::remove(self, s, i)
    }
    #[inline]
    fn first<S: NodeArena>(&self, s: &S) -> NodeIdx {
        BusyTree::first(self, s)
    }
    #[inline]
    fn next<S: NodeArena>(&self, s: &S, i: NodeIdx) -> NodeIdx {
        BusyTree::next(self, s, i)
    }
    #[inline]
    fn prev<S: NodeArena>(&self, s: &S, i: NodeIdx) -> NodeIdx {
        BusyTree::prev(self, s, i)
    }
    #[inline]
    fn find_start<S: NodeArena>(&self, s: &S, key: u64, visited: &mut u32) -> NodeIdx {
        BusyTree::find_start(self, s, key, visited)
    }
    #[inline]
    fn floor<S: NodeArena>(&self, s: &S, addr: u64, visited: &mut u32) -> NodeIdx {
        BusyTree::floor(self, s, addr, visited)
    }
    fn check<S: NodeArena>(&self, s: &S) -> Result<usize, &'static str> {
        BusyTree::check(self, s)
    }
}
