//! `btree`: the free blocks in a B-tree of wide nodes (four cache lines,
//! twelve slots each), every slot of an inner node carrying the lowest
//! start and the largest free block below it — the shape of the maple tree
//! a 2026 RFC proposes for vmalloc's free space in place of the augmented
//! rbtree. Lowest fit is one descent in the common case (a slot whose
//! largest block is too small is skipped without being read; only an
//! alignment or window that a large enough block cannot meet sends the
//! search on to the next slot); a node's twelve slots are scanned in
//! adjacent lines, so a 100 000-block tree is five nodes deep instead of
//! ~20 scattered AVL nodes.
//!
//! Placement is exactly the other policies' (the same [`Fit::fit_in`] on
//! the same maximal free blocks, lowest first).
//!
//! Nodes are runs of [`K`] slots of the space's node table (the same
//! [`NodeSource`](crate::NodeSource) as every policy). Nodes are not
//! rebalanced on removal: an emptied node is unlinked and given back, a
//! root with one child is dropped, and the depth only grows by splitting a
//! full root (so it stays below 20 for any number of operations).
//!
//! A free may need new nodes (a split): an allocation first tops up a
//! reserve of `depth + 1` spare nodes (a split at every level and a new
//! root), and a free that adds a block (one that merges with no free
//! neighbour) first takes the nodes its insert may split into, before
//! anything changes; either fails cleanly with `NodePoolExhausted` when
//! the source cannot provide them. A free refused that way leaves the area
//! allocated, to be freed again once nodes are available; frees that merge
//! never need a node. So a source that cannot grow can make frees fail
//! where the augmented tree's would not: give it headroom (the B-tree takes
//! up to four slots per free block where the augmented tree takes one).

use super::{BusyTree, BusyView, FreeAreaSearch, Search};
use crate::error::VmapError;
use crate::node::{NIL, NodeArena, NodeIdx};
use crate::request::Fit;

mod node;
mod ops;
#[cfg(all(test, not(kmm_loom)))]
mod tests;

use node::{F, K, MAXD, get, get_mut};

/// Lowest fit through a B-tree of free blocks with per-slot maxima.
pub struct BTree {
    root: NodeIdx,
    /// Levels (1: the root is a leaf).
    depth: usize,
    /// `(node, slot)` per level, root first, from the last descent.
    path: [(NodeIdx, usize); MAXD],
    /// Spare nodes for frees that split.
    spare: [NodeIdx; MAXD + 1],
    nspare: usize,
    /// The busy predecessor of the area the last `claim` took.
    pred: NodeIdx,
}

impl FreeAreaSearch for BTree {
    const NAME: &'static str = "btree";
}

impl Search for BTree {
    type Busy = BusyTree;

    fn init<S: NodeArena>(s: &mut S, start: u64, end: u64) -> Result<Self, VmapError> {
        let mut t = Self {
            root: NIL,
            depth: 1,
            path: [(NIL, 0); MAXD],
            spare: [NIL; MAXD + 1],
            nspare: 0,
            pred: NIL,
        };
        t.root = t.new_node(s).ok_or(VmapError::NodePoolExhausted)?;
        get_mut(s, t.root).insert(0, start, end, NIL);
        Ok(t)
    }

    fn find_fit<S: NodeArena>(
        &mut self,
        s: &S,
        _: &mut BusyTree,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<u64> {
        self.search(s, self.root, 0, fit, visited)
    }

    fn find_exact<S: NodeArena>(
        &mut self,
        s: &S,
        _: &mut BusyTree,
        a: u64,
        size: u64,
        visited: &mut u32,
    ) -> bool {
        let (r, _) = self.descend(s, a, visited);
        let leaf = self.path[self.depth - 1].0;
        let n = get(s, leaf);
        if r == 0 || n.hi[r - 1] < a + size {
            return false;
        }
        self.path[self.depth - 1].1 = r - 1;
        true
    }

    fn claim<S: NodeArena>(
        &mut self,
        s: &mut S,
        a: u64,
        size: u64,
        node: NodeIdx,
    ) -> Result<(), VmapError> {
        // Before anything changes: spares for this split and later frees.
        if !self.fill_reserve(s) {
            return Err(VmapError::NodePoolExhausted);
        }
        let d = self.depth - 1;
        let (leaf, j) = self.path[d];
        let n = get_mut(s, leaf);
        let (bs, be, e) = (n.lo[j], n.hi[j], a + size);
        // Whatever is left below the new area, the busy area below the
        // block is the one below the new area.
        self.pred = n.kid[j];
        match (a == bs, e == be) {
            (true, true) => self.remove_at(s, d, j),
            (true, false) => {
                (n.lo[j], n.kid[j]) = (e, node);
                self.fix_up(s, d, Some((be - bs, be - e)));
            }
            (false, true) => {
                n.hi[j] = a;
                self.fix_up(s, d, Some((be - bs, a - bs)));
            }
            (false, false) => {
                n.hi[j] = a;
                self.insert_at(s, d, j + 1, (e, be, node), None);
            }
        }
        Ok(())
    }

    #[inline]
    fn busy_pred<S: NodeArena>(&self, _: &S, _: NodeIdx) -> Option<NodeIdx> {
        Some(self.pred)
    }

    /// Only a free that merges with no free block adds one, and only that
    /// insert can split: one node per full node on the path from the leaf
    /// up, and one more for a new root if they all are. Those are taken
    /// into the reserve now, so a free that merges needs none and always
    /// goes through, however fragmented the source.
    fn prepare_release<S: NodeArena>(
        &mut self,
        s: &mut S,
        start: u64,
        end: u64,
    ) -> Result<(), VmapError> {
        if self.nspare > self.depth {
            return Ok(()); // the common case: the reserve covers any insert
        }
        let mut v = 0;
        let (r, next) = self.descend(s, start, &mut v);
        let d = self.depth - 1;
        let n = get(s, self.path[d].0);
        let len = n.len as usize;
        let below = r > 0 && n.hi[r - 1] == start;
        let above = if r < len { n.lo[r] == end } else { next == end };
        if below || above {
            return Ok(());
        }
        let full = (0..self.depth)
            .rev()
            .take_while(|&l| get(s, self.path[l].0).len as usize == F)
            .count();
        let need = if full == self.depth { full + 1 } else { full };
        while self.nspare < need {
            let i = s.alloc_run(K).ok_or(VmapError::NodePoolExhausted)?;
            self.spare[self.nspare] = i;
            self.nspare += 1;
        }
        Ok(())
    }

    fn release<S: NodeArena>(
        &mut self,
        s: &mut S,
        start: u64,
        mut end: u64,
        prev: NodeIdx,
        _: NodeIdx,
    ) -> bool {
        let mut v = 0;
        let (r, next) = loop {
            let (r, next) = self.descend(s, start, &mut v);
            let n = get(s, self.path[self.depth - 1].0);
            if r < n.len as usize || next != end {
                break (r, next);
            }
            // The block above starts the next leaf: take it out first and
            // free the union (no two free blocks touch, so once only).
            let (r2, _) = self.descend(s, end, &mut v);
            let d = self.depth - 1;
            end = get(s, self.path[d].0).hi[r2 - 1];
            self.remove_at(s, d, r2 - 1);
        };
        let _ = next;
        let d = self.depth - 1;
        let leaf = self.path[d].0;
        let n = get_mut(s, leaf);
        let below = r > 0 && n.hi[r - 1] == start;
        let above = r < n.len as usize && n.lo[r] == end;
        match (below, above) {
            (true, true) => {
                n.hi[r - 1] = n.hi[r];
                self.remove_at(s, d, r);
            }
            (true, false) => {
                let p = n.lo[r - 1];
                n.hi[r - 1] = end;
                self.fix_up(s, d, Some((start - p, end - p)));
            }
            (false, true) => {
                let x = n.hi[r];
                (n.lo[r], n.kid[r]) = (start, prev);
                self.fix_up(s, d, Some((x - end, x - start)));
            }
            (false, false) => {
                self.insert_at(s, d, r, (start, end, prev), Some((0, end - start)));
            }
        }
        let _ = self.fill_reserve(s);
        false
    }

    fn check<S: NodeArena>(
        &self,
        s: &S,
        busy: &BusyView<'_>,
        start: u64,
        end: u64,
    ) -> Result<(), &'static str> {
        if self.depth == 0 || self.depth > MAXD {
            return Err("btree: depth out of range");
        }
        // Free blocks (maximal) and busy areas tile [start, end) exactly.
        let mut b = busy.first(s);
        let mut at = start;
        let mut last_free_end = None;
        let mut tile = |fs: u64, fe: u64, below: NodeIdx| -> Result<(), &'static str> {
            if fs >= fe {
                return Err("btree: empty block");
            }
            if last_free_end == Some(fs) {
                return Err("btree: adjacent free blocks not merged");
            }
            let mut last = NIL;
            while b != NIL && s.node(b).start < fs {
                if s.node(b).start != at {
                    return Err("free and busy areas do not tile the space");
                }
                at = s.node(b).end;
                last = b;
                b = busy.next(s, b);
            }
            if below != last {
                return Err("btree: a block's busy area below is wrong");
            }
            if fs != at {
                return Err("free and busy areas do not tile the space");
            }
            at = fe;
            last_free_end = Some(fe);
            Ok(())
        };
        self.walk(s, self.root, 0, &mut tile)?;
        while b != NIL {
            if s.node(b).start != at {
                return Err("free and busy areas do not tile the space");
            }
            at = s.node(b).end;
            b = busy.next(s, b);
        }
        if at != end {
            return Err("free and busy areas do not reach the end of the space");
        }
        Ok(())
    }
}
