//! The augmented free tree (Linux's `free_vmap_area_root`): FREE blocks
//! ordered by address, each node carrying the largest block size in its
//! subtree, so the lowest block that fits is found in O(log n) and a freed
//! range merges with both neighbours.
//!
//! Blocks are kept maximal (two free blocks never touch), so with page
//! alignment any block of `size` bytes fits; the subtree maximum prunes every
//! subtree that cannot hold the request.

use crate::error::VmapError;
use crate::node::{NIL, NodeIdx, NodeSource};
use crate::request::Fit;
use crate::tree::{MaxFree, Tree};

/// FREE blocks `[start, end)`, ordered by address, with subtree maxima.
pub(crate) struct FreeTree {
    pub(crate) tree: Tree<MaxFree>,
}

impl FreeTree {
    pub(crate) const fn new() -> Self {
        Self { tree: Tree::new() }
    }

    /// Adds the block `[start, end)` without merging (initial setup).
    pub(crate) fn insert_block<S: NodeSource>(
        &mut self,
        s: &mut S,
        start: u64,
        end: u64,
    ) -> Result<(), VmapError> {
        let n = s.alloc_node().ok_or(VmapError::NodePoolExhausted)?;
        let node = s.node_mut(n);
        node.start = start;
        node.end = end;
        self.tree.insert(s, n);
        Ok(())
    }

    /// The lowest block holding a fit for `fit`, and the address in it.
    /// `visited` counts nodes looked at.
    pub(crate) fn lowest_fit<S: NodeSource>(
        &self,
        s: &S,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<(NodeIdx, u64)> {
        Self::search(s, self.tree.root, fit, visited)
    }

    fn search<S: NodeSource>(
        s: &S,
        i: NodeIdx,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<(NodeIdx, u64)> {
        if i == NIL {
            return None;
        }
        *visited += 1;
        let n = s.node(i);
        if n.aug < fit.size {
            return None;
        }
        // Everything left of n ends at or below n.start: only worth a look if
        // that lies above vstart.
        if n.start > fit.vstart {
            if let Some(r) = Self::search(s, n.left, fit, visited) {
                return Some(r);
            }
        }
        if n.start >= fit.vend {
            return None;
        }
        if n.end - n.start >= fit.size {
            if let Some(a) = fit.fit_in(n.start, n.end) {
                return Some((i, a));
            }
        }
        // Everything right of n starts at or above n.end.
        if n.end.saturating_add(fit.size) > fit.vend {
            return None;
        }
        Self::search(s, n.right, fit, visited)
    }

    /// The block containing `[a, a + size)`, if that range is entirely free.
    pub(crate) fn containing<S: NodeSource>(
        &self,
        s: &S,
        a: u64,
        size: u64,
        visited: &mut u32,
    ) -> Option<NodeIdx> {
        let f = self.tree.floor(s, a, visited);
        if f != NIL && s.node(f).end >= a + size {
            Some(f)
        } else {
            None
        }
    }

    /// Removes `[a, a + size)` from block `b` (which contains it). A split in
    /// the middle needs a node from `s`; if there is none, nothing changed.
    pub(crate) fn carve<S: NodeSource>(
        &mut self,
        s: &mut S,
        b: NodeIdx,
        a: u64,
        size: u64,
    ) -> Result<(), VmapError> {
        let (bs, be) = (s.node(b).start, s.node(b).end);
        let e = a + size;
        debug_assert!(bs <= a && e <= be);
        match (a == bs, e == be) {
            (true, true) => {
                self.tree.remove(s, b);
                s.free_node(b);
            }
            (true, false) => {
                s.node_mut(b).start = e;
                self.tree.update_path(s, b);
            }
            (false, true) => {
                s.node_mut(b).end = a;
                self.tree.update_path(s, b);
            }
            (false, false) => {
                let n = s.alloc_node().ok_or(VmapError::NodePoolExhausted)?;
                s.node_mut(b).end = a;
                self.tree.update_path(s, b);
                let node = s.node_mut(n);
                node.start = e;
                node.end = be;
                self.tree.insert(s, n);
            }
        }
        Ok(())
    }

    /// Returns `[start, end)` to the free space, merging with the block below
    /// and/or above. `spare` is an unlinked node the caller no longer needs:
    /// used if no merge happens, otherwise released to `s`. Never fails.
    pub(crate) fn release<S: NodeSource>(
        &mut self,
        s: &mut S,
        start: u64,
        end: u64,
        spare: NodeIdx,
    ) {
        let mut visited = 0;
        let below = self.tree.floor(s, start, &mut visited);
        let above = if below == NIL {
            self.tree.first(s)
        } else {
            self.tree.next(s, below)
        };
        let merge_below = below != NIL && s.node(below).end == start;
        let merge_above = above != NIL && s.node(above).start == end;
        match (merge_below, merge_above) {
            (true, true) => {
                let ae = s.node(above).end;
                self.tree.remove(s, above);
                s.free_node(above);
                s.node_mut(below).end = ae;
                self.tree.update_path(s, below);
                s.free_node(spare);
            }
            (true, false) => {
                s.node_mut(below).end = end;
                self.tree.update_path(s, below);
                s.free_node(spare);
            }
            (false, true) => {
                s.node_mut(above).start = start;
                self.tree.update_path(s, above);
                s.free_node(spare);
            }
            (false, false) => {
                let node = s.node_mut(spare);
                node.start = start;
                node.end = end;
                node.parked = false;
                // The neighbours are known: link without a second descent.
                self.tree.insert_between(s, spare, below, above);
            }
        }
    }

    /// Total free bytes (walks the tree).
    #[cfg(test)]
    pub(crate) fn free_bytes<S: NodeSource>(&self, s: &S) -> u64 {
        let mut total = 0;
        let mut i = self.tree.first(s);
        while i != NIL {
            total += s.node(i).end - s.node(i).start;
            i = self.tree.next(s, i);
        }
        total
    }

    /// Tree invariants plus maximality (no two blocks touch).
    pub(crate) fn check<S: NodeSource>(&self, s: &S) -> Result<(), &'static str> {
        self.tree.check(s)?;
        let mut i = self.tree.first(s);
        let mut prev_end = None;
        while i != NIL {
            if prev_end == Some(s.node(i).start) {
                return Err("adjacent free blocks not merged");
            }
            prev_end = Some(s.node(i).end);
            i = self.tree.next(s, i);
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::node::FixedPool;

    const P: u64 = 0x1000;

    fn fit(size: u64, align: u64) -> Fit {
        Fit {
            size,
            align,
            phase: 0,
            nocross: 0,
            vstart: 0,
            vend: 1 << 40,
        }
    }

    fn blocks(t: &FreeTree, s: &FixedPool<64>) -> [(u64, u64); 4] {
        let mut out = [(0, 0); 4];
        let mut i = t.tree.first(s);
        let mut k = 0;
        while i != NIL {
            out[k] = (s.node(i).start / P, s.node(i).end / P);
            k += 1;
            i = t.tree.next(s, i);
        }
        out
    }

    #[test]
    fn lowest_fit_prefers_low_address_and_prunes() {
        let mut s = FixedPool::<64>::new();
        let mut t = FreeTree::new();
        for (a, b) in [(0, 1), (4, 6), (10, 20), (30, 31)] {
            t.insert_block(&mut s, a * P, b * P).unwrap();
        }
        t.check(&s).unwrap();
        let mut v = 0;
        assert_eq!(t.lowest_fit(&s, &fit(P, P), &mut v).map(|x| x.1), Some(0));
        assert_eq!(
            t.lowest_fit(&s, &fit(2 * P, P), &mut v).map(|x| x.1),
            Some(4 * P)
        );
        assert_eq!(
            t.lowest_fit(&s, &fit(2 * P, 8 * P), &mut v).map(|x| x.1),
            Some(16 * P)
        );
        assert_eq!(t.lowest_fit(&s, &fit(11 * P, P), &mut v), None);
        let mut high = fit(P, P);
        high.vstart = 5 * P;
        assert_eq!(t.lowest_fit(&s, &high, &mut v).map(|x| x.1), Some(5 * P));
    }

    #[test]
    fn carve_and_release_merge_both_sides() {
        let mut s = FixedPool::<64>::new();
        let mut t = FreeTree::new();
        t.insert_block(&mut s, 0, 10 * P).unwrap();
        let b = t.tree.root;
        t.carve(&mut s, b, 4 * P, 2 * P).unwrap();
        t.check(&s).unwrap();
        assert_eq!(blocks(&t, &s)[..2], [(0, 4), (6, 10)]);
        let spare = s.alloc_node().unwrap();
        t.release(&mut s, 4 * P, 6 * P, spare);
        t.check(&s).unwrap();
        assert_eq!(blocks(&t, &s)[..2], [(0, 10), (0, 0)]);
        assert_eq!(s.in_use(), 1);
        assert_eq!(t.free_bytes(&s), 10 * P);
    }

    #[test]
    fn carve_split_reports_exhaustion_unchanged() {
        let mut s = FixedPool::<1>::new();
        let mut t = FreeTree::new();
        t.insert_block(&mut s, 0, 10 * P).unwrap();
        let b = t.tree.root;
        assert_eq!(
            t.carve(&mut s, b, 4 * P, P),
            Err(VmapError::NodePoolExhausted)
        );
        assert_eq!(t.free_bytes(&s), 10 * P);
        t.check(&s).unwrap();
    }
}
