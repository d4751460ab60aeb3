//! `augmented` (the default without `alloc`): a second tree of FREE blocks with the largest
//! block size per subtree ([`crate::free_tree`]); lowest fit in O(log n),
//! frees merge with both neighbours. What Linux has used since 5.2.

use super::{BusyTree, BusyView, FreeAreaSearch, Search};
use crate::error::VmapError;
use crate::free_tree::FreeTree;
use crate::node::{NIL, NodeArena, NodeIdx, TreeNode};
use crate::request::Fit;

/// Lowest fit through the augmented free tree.
pub struct Augmented {
    free: FreeTree,
    /// The free block the last `find_*` chose, for `claim`.
    found: NodeIdx,
}

impl FreeAreaSearch for Augmented {
    const NAME: &'static str = "augmented";
}

impl Search for Augmented {
    type Busy = BusyTree;

    /// The free tree is the free index, the tiling list gives the busy
    /// neighbours and [`release`](Search::release) ignores `prev`.
    const PARK_OUTSIDE_BUSY_TREE: bool = true;

    fn init<S: NodeArena>(s: &mut S, start: u64, end: u64) -> Result<Self, VmapError> {
        let mut free = FreeTree::new();
        free.insert_block(s, start, end)?;
        Ok(Self { free, found: NIL })
    }

    fn find_fit<S: NodeArena>(
        &mut self,
        s: &S,
        _: &mut BusyTree,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<u64> {
        let (b, a) = self.free.lowest_fit(s, fit, visited)?;
        self.found = b;
        Some(a)
    }

    fn find_exact<S: NodeArena>(
        &mut self,
        s: &S,
        _: &mut BusyTree,
        a: u64,
        size: u64,
        visited: &mut u32,
    ) -> bool {
        match self.free.containing(s, a, size, visited) {
            Some(b) => {
                self.found = b;
                true
            }
            None => false,
        }
    }

    fn claim<S: NodeArena>(
        &mut self,
        s: &mut S,
        a: u64,
        size: u64,
        node: NodeIdx,
    ) -> Result<(), VmapError> {
        let b = core::mem::replace(&mut self.found, NIL);
        self.free.carve(s, b, a, size, node)
    }

    /// From the tiling list: the tile below `node`, or the one below that
    /// if it is free.
    #[inline]
    fn busy_pred<S: NodeArena>(&self, s: &S, node: NodeIdx) -> Option<NodeIdx> {
        Some(busy_or_beyond(s, s.node(node).prev_tile, |n| n.prev_tile))
    }

    /// From the tiling list, as [`busy_pred`](Self::busy_pred) upwards.
    #[inline]
    fn busy_after<S: NodeArena>(&self, s: &S, node: NodeIdx) -> Option<NodeIdx> {
        Some(busy_or_beyond(s, s.node(node).next_tile, |n| n.next_tile))
    }

    fn wants_prev(&self) -> bool {
        false
    }

    fn release<S: NodeArena>(
        &mut self,
        s: &mut S,
        _: u64,
        _: u64,
        _: NodeIdx,
        freed: NodeIdx,
    ) -> bool {
        self.free.release(s, freed);
        true
    }

    fn check<S: NodeArena>(
        &self,
        s: &S,
        busy: &BusyView<'_>,
        start: u64,
        end: u64,
    ) -> Result<(), &'static str> {
        self.free.check(s)?;
        // Free and busy blocks must tile [start, end) exactly.
        // The tiling list links them in that order, each marked free or busy.
        let (mut f, mut b) = (self.free.tree.first(s), busy.first(s));
        let mut at = start;
        let mut last = NIL;
        while f != NIL || b != NIL {
            let take_free = b == NIL || (f != NIL && s.node(f).start < s.node(b).start);
            let i = if take_free { f } else { b };
            if s.node(i).start != at {
                return Err("free and busy areas do not tile the space");
            }
            if s.node(i).free != take_free {
                return Err("free flag does not match the tree a node is in");
            }
            if s.node(i).prev_tile != last || (last != NIL && s.node(last).next_tile != i) {
                return Err("tiling list out of address order");
            }
            last = i;
            at = s.node(i).end;
            if take_free {
                f = self.free.tree.next(s, f);
            } else {
                b = busy.next(s, b);
            }
        }
        if at != end {
            return Err("free and busy areas do not reach the end of the space");
        }
        if last != NIL && s.node(last).next_tile != NIL {
            return Err("tiling list runs past the end of the space");
        }
        Ok(())
    }
}

/// `t`, a tile next to a busy area, if it is busy (or `NIL`); otherwise the
/// tile beyond it, `beyond(t)`, which is busy (or `NIL`): two free blocks
/// never touch.
#[inline]
fn busy_or_beyond<S: NodeArena>(
    s: &S,
    t: NodeIdx,
    beyond: impl Fn(&TreeNode) -> NodeIdx,
) -> NodeIdx {
    if t != NIL && s.node(t).free {
        beyond(s.node(t))
    } else {
        t
    }
}
