//! The `FreeAreaSearch` seam: how the lowest fitting free block is found.
//!
//! Five policies, one file each, all producing exactly the same placement:
//! [`Linear`] (the 2010 baseline), [`FreeVmapCache`] (the 2010 fix),
//! [`Augmented`] (a free tree with subtree maxima, Linux since 5.2),
//! [`BTree`] (wide nodes with per-slot maxima, the maple-tree shape) and,
//! with `alloc`, `Blocks` (no free index: the busy index's gaps).
//! [`DefaultPolicy`] names the one the fronts use. A policy names its busy
//! index too ([`Search::Busy`]): the AVL [`BusyTree`] for the first four.

mod augmented;
#[cfg(feature = "alloc")]
mod blocks;
mod btree;
mod free_vmap_cache;
mod linear;

pub use augmented::Augmented;
#[cfg(feature = "alloc")]
pub use blocks::Blocks;
pub use btree::BTree;
pub use free_vmap_cache::FreeVmapCache;
pub use linear::Linear;

use crate::busy::BusyIndex;
use crate::error::VmapError;
use crate::node::{NIL, NodeArena, NodeIdx};
use crate::request::Fit;
use crate::tree::{NoAug, Tree};

/// The policy the fronts (`GlobalVmap`, `ShardedVmap`, feature `alloc`)
/// use unless told otherwise: [`Blocks`], whose nodes come from the heap,
/// so [`Augmented`] without `alloc`.
#[cfg(feature = "alloc")]
pub type DefaultPolicy = Blocks;
/// The policy the fronts use unless told otherwise: [`Augmented`] without
/// `alloc` (`Blocks` takes its nodes from the heap).
#[cfg(not(feature = "alloc"))]
pub type DefaultPolicy = Augmented;

/// The busy tree (`vmap_area_root`): allocated areas by address.
pub type BusyTree = Tree<NoAug>;

/// Every busy area in address order, as a policy's
/// [`check`](Search::check) walks them: the busy index, plus the areas
/// parked outside it in the sharded front's pools (`parked`, sorted by
/// start; empty for a plain space). Checks only: `next` searches.
pub struct BusyView<'a, B = BusyTree> {
    pub(crate) tree: &'a B,
    pub(crate) parked: &'a [NodeIdx],
}

impl<B: BusyIndex> BusyView<'_, B> {
    /// The lowest busy area, or `NIL`.
    pub(crate) fn first<S: NodeArena>(&self, s: &S) -> NodeIdx {
        let b = self.tree.first(s);
        let p = self.parked.first().copied().unwrap_or(NIL);
        lower(s, b, p)
    }

    /// The busy area after `i` (one of this view's), or `NIL`.
    pub(crate) fn next<S: NodeArena>(&self, s: &S, i: NodeIdx) -> NodeIdx {
        let key = s.node(i).start;
        let mut v = 0;
        let f = self.tree.floor(s, key, &mut v);
        let b = if f == NIL {
            self.tree.first(s)
        } else {
            self.tree.next(s, f)
        };
        let k = self.parked.partition_point(|&j| s.node(j).start <= key);
        let p = self.parked.get(k).copied().unwrap_or(NIL);
        lower(s, b, p)
    }

    /// The busy-tree node starting at `key` (parked areas are not in it).
    pub(crate) fn find_start<S: NodeArena>(&self, s: &S, key: u64, v: &mut u32) -> NodeIdx {
        self.tree.find_start(s, key, v)
    }
}

/// The one of `a`, `b` (either may be `NIL`) with the lower start.
fn lower<S: NodeArena>(s: &S, a: NodeIdx, b: NodeIdx) -> NodeIdx {
    match (a, b) {
        (NIL, x) | (x, NIL) => x,
        _ if s.node(a).start <= s.node(b).start => a,
        _ => b,
    }
}

/// How a [`VmapSpace`](crate::VmapSpace) finds free blocks: [`Linear`],
/// [`FreeVmapCache`] or [`Augmented`]. The trait is sealed (its methods are
/// the allocator's internal protocol, over crate-private types), so the
/// policies are chosen, not implemented, outside this crate.
pub trait FreeAreaSearch: Sized + Send + Sync + Search {
    /// The policy's name, as the harness prints it.
    const NAME: &'static str;
}

/// The allocator's internal protocol behind [`FreeAreaSearch`]: public in a
/// private module, so nothing outside this crate can name or implement it.
///
/// Protocol: `find_fit`/`find_exact` locate an address without changing the
/// areas; `claim` takes it (the new busy node is passed so a policy can
/// remember it); `release` gives a freed range back after its busy node was
/// unlinked.
pub trait Search: Sized {
    /// Where the space keeps its busy areas: [`BusyTree`] for a policy
    /// with a free index of its own, or an index that is both.
    type Busy: BusyIndex;

    /// Sets up the policy for an empty space `[start, end)`.
    fn init<S: NodeArena>(s: &mut S, start: u64, end: u64) -> Result<Self, VmapError>;

    /// The lowest address satisfying `fit`, or `None`; counts visited nodes.
    fn find_fit<S: NodeArena>(
        &mut self,
        s: &S,
        busy: &mut Self::Busy,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<u64>;

    /// Whether `[a, a + size)` is entirely free.
    fn find_exact<S: NodeArena>(
        &mut self,
        s: &S,
        busy: &mut Self::Busy,
        a: u64,
        size: u64,
        visited: &mut u32,
    ) -> bool;

    /// Takes `[a, a + size)` found by the last `find_*` call; `node` is the
    /// busy node about to be linked. On error nothing changed.
    fn claim<S: NodeArena>(
        &mut self,
        s: &mut S,
        a: u64,
        size: u64,
        node: NodeIdx,
    ) -> Result<(), VmapError>;

    /// The busy area just below `node` (claimed by the last
    /// [`claim`](Self::claim), range set, not yet in the busy tree): `NIL`
    /// when none, `None` when the policy does not know, so the busy tree is
    /// searched from its root.
    #[inline]
    fn busy_pred<S: NodeArena>(&self, _s: &S, _node: NodeIdx) -> Option<NodeIdx> {
        None
    }

    /// The busy area just above the busy `node` (`NIL` when none), or
    /// `None` when the policy does not know without a search.
    #[inline]
    fn busy_after<S: NodeArena>(&self, _s: &S, _node: NodeIdx) -> Option<NodeIdx> {
        None
    }

    /// Whether the next [`release`](Self::release) needs the freed area's
    /// busy predecessor (looked up before the node is unlinked; skipped when
    /// the policy has no use for it).
    fn wants_prev(&self) -> bool {
        true
    }

    /// Called before the busy area `[start, end)` is unlinked for a free:
    /// makes sure its [`release`](Self::release) has every node it may
    /// need, or fails (the free is then refused with that error and
    /// nothing changed). Policies whose release never allocates keep the
    /// default.
    #[inline]
    fn prepare_release<S: NodeArena>(
        &mut self,
        _s: &mut S,
        _start: u64,
        _end: u64,
    ) -> Result<(), VmapError> {
        Ok(())
    }

    /// `[start, end)` was freed; its busy node `freed` is unlinked (but its
    /// contents intact) and `prev` was its busy predecessor (`NIL` if
    /// [`wants_prev`](Self::wants_prev) said no). Returns whether
    /// the policy kept `freed` (otherwise the caller frees it).
    fn release<S: NodeArena>(
        &mut self,
        s: &mut S,
        start: u64,
        end: u64,
        prev: NodeIdx,
        freed: NodeIdx,
    ) -> bool;

    /// Whether a parked area (the sharded front's pools) leaves the busy
    /// tree while it stays busy, as Linux's pooled areas leave
    /// `vn->busy.root`: only for a policy that keeps its own index of free
    /// blocks (a policy walking the busy tree would see the parked range as
    /// free), finds busy neighbours without the busy tree, and needs no
    /// busy predecessor on release. Otherwise parked areas stay in the busy
    /// tree, flagged.
    const PARK_OUTSIDE_BUSY_TREE: bool = false;

    /// The policy's own invariants, given every busy area.
    fn check<S: NodeArena>(
        &self,
        s: &S,
        busy: &BusyView<'_, Self::Busy>,
        start: u64,
        end: u64,
    ) -> Result<(), &'static str>;
}

/// Walks the busy tree from `addr` (the first candidate) and `first` (the
/// first busy area that may be in the way) over busy areas until a gap fits;
/// records the largest skipped hole in `hole`. Shared by `linear` and
/// `free_vmap_cache`: this is the 2010 search loop.
#[inline]
pub(crate) fn walk<S: NodeArena>(
    s: &S,
    busy: &BusyTree,
    fit: &Fit,
    mut addr: u64,
    mut first: NodeIdx,
    hole: &mut u64,
    visited: &mut u32,
) -> Option<u64> {
    loop {
        let end = addr.checked_add(fit.size)?;
        if end > fit.vend {
            return None;
        }
        if first == NIL {
            return Some(addr);
        }
        *visited += 1;
        let n = s.node(first);
        if end <= n.start {
            return Some(addr);
        }
        if n.start > addr && n.start - addr > *hole {
            *hole = n.start - addr;
        }
        addr = fit.candidate(n.end)?;
        first = busy.next(s, first);
    }
}

/// Whether `[a, a + size)` overlaps no busy area.
#[inline]
pub(crate) fn busy_range_free<S: NodeArena>(
    s: &S,
    busy: &BusyTree,
    a: u64,
    size: u64,
    visited: &mut u32,
) -> bool {
    let f = busy.first_end_above(s, a, visited);
    f == NIL || s.node(f).start >= a + size
}
