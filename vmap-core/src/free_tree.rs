//! The augmented free tree (Linux's `free_vmap_area_root`): FREE blocks
//! ordered by address, each node carrying the largest block size in its
//! subtree, so the lowest block that fits is found in O(log n) and a freed
//! range merges with both neighbours.
//!
//! Blocks are kept maximal (two free blocks never touch), so with page
//! alignment any block of `size` bytes fits; the subtree maximum prunes every
//! subtree that cannot hold the request.

use crate::error::VmapError;
use crate::node::{NIL, NodeArena, NodeIdx};
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
    pub(crate) fn insert_block<S: NodeArena>(
        &mut self,
        s: &mut S,
        start: u64,
        end: u64,
    ) -> Result<(), VmapError> {
        let n = s.alloc_node().ok_or(VmapError::NodePoolExhausted)?;
        let node = s.node_mut(n);
        node.start = start;
        node.end = end;
        node.free = true;
        node.prev_tile = NIL;
        node.next_tile = NIL;
        self.tree.insert(s, n);
        Ok(())
    }

    /// The lowest block holding a fit for `fit`, and the address in it.
    /// `visited` counts nodes looked at.
    pub(crate) fn lowest_fit<S: NodeArena>(
        &self,
        s: &S,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<(NodeIdx, u64)> {
        if fit.phase == 0 && fit.nocross == 0 {
            if let Some(r) = Self::descend(s, self.tree.root, fit, visited) {
                return Some(r);
            }
        }
        Self::search(s, self.tree.root, fit, visited)
    }

    /// The common request (no phase, no boundary to stay clear of) in one
    /// descent, as Linux's `find_vmap_lowest_match`: the lowest block of at
    /// least `fit.size` bytes, taken if its start also meets the alignment
    /// and `[vstart, vend)`. Every block below it is too small for any
    /// placement, so it is then the answer [`search`](Self::search) gives;
    /// otherwise (`None`) the caller runs that search.
    ///
    /// One node per level and no recursion: the aged workload spent ~30 %
    /// of its instructions in the recursive search (BENCHMARKS.md, session
    /// 16).
    #[inline]
    fn descend<S: NodeArena>(
        s: &S,
        mut i: NodeIdx,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<(NodeIdx, u64)> {
        if i == NIL || s.node(i).aug < fit.size {
            return None;
        }
        loop {
            *visited += 1;
            let n = s.node(i);
            if n.left != NIL && s.node(n.left).aug >= fit.size {
                i = n.left;
                continue;
            }
            if n.end - n.start >= fit.size {
                let a = n.start;
                let fits = a >= fit.vstart
                    && a & (fit.align - 1) == 0
                    && a.checked_add(fit.size).is_some_and(|e| e <= fit.vend);
                return fits.then_some((i, a));
            }
            // `n.aug >= size` and neither the left subtree nor `n` has it:
            // the right subtree does (the augmented invariant).
            i = n.right;
            debug_assert!(i != NIL, "augmented maximum without a block behind it");
            if i == NIL {
                return None;
            }
        }
    }

    fn search<S: NodeArena>(
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
    pub(crate) fn containing<S: NodeArena>(
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

    /// Removes `[a, a + size)` from block `b` (which contains it) for the
    /// busy node `n` (its range is set by the caller), and links `n` into the
    /// tiling list in its place. A split in the middle needs a node from `s`;
    /// if there is none, nothing changed.
    pub(crate) fn carve<S: NodeArena>(
        &mut self,
        s: &mut S,
        b: NodeIdx,
        a: u64,
        size: u64,
        n: NodeIdx,
    ) -> Result<(), VmapError> {
        let (bs, be) = (s.node(b).start, s.node(b).end);
        let (bp, bn) = (s.node(b).prev_tile, s.node(b).next_tile);
        let e = a + size;
        debug_assert!(bs <= a && e <= be);
        // The tiles around `n` once it is linked.
        let (prev, next) = match (a == bs, e == be) {
            (true, true) => {
                self.tree.remove(s, b);
                s.free_node(b);
                (bp, bn)
            }
            (true, false) => {
                s.node_mut(b).start = e;
                self.tree.update_path(s, b);
                (bp, b)
            }
            (false, true) => {
                s.node_mut(b).end = a;
                self.tree.update_path(s, b);
                (b, bn)
            }
            (false, false) => {
                let m = s.alloc_node().ok_or(VmapError::NodePoolExhausted)?;
                s.node_mut(b).end = a;
                self.tree.update_path(s, b);
                let node = s.node_mut(m);
                node.start = e;
                node.end = be;
                node.free = true;
                self.tree.insert(s, m);
                Self::link(s, m, bn);
                (b, m)
            }
        };
        let node = s.node_mut(n);
        node.free = false;
        Self::link(s, prev, n);
        Self::link(s, n, next);
        Ok(())
    }

    /// Makes `lo` and `hi` adjacent tiles (either may be `NIL`).
    #[inline]
    fn link<S: NodeArena>(s: &mut S, lo: NodeIdx, hi: NodeIdx) {
        if lo != NIL {
            s.node_mut(lo).next_tile = hi;
        }
        if hi != NIL {
            s.node_mut(hi).prev_tile = lo;
        }
    }

    /// Returns the busy area `freed` (unlinked from the busy tree, its range
    /// and tile links intact) to the free space, merging with the free block
    /// below and/or above. Its node becomes the free block if no merge
    /// happens, otherwise it is released to `s`. Never fails.
    ///
    /// The tiling list names both neighbours, so a merge needs no search of
    /// the free tree. A merge on both sides removes whichever of the two
    /// blocks lies below the other in the tree (it has at most one child, so
    /// no successor swap) and grows the other over both; growth only raises
    /// subtree maxima, which [`Tree::raise_aug`] does without reading
    /// siblings.
    pub(crate) fn release<S: NodeArena>(&mut self, s: &mut S, freed: NodeIdx) {
        let f = s.node(freed);
        let (start, end, p, q) = (f.start, f.end, f.prev_tile, f.next_tile);
        let below = if p != NIL && s.node(p).free { p } else { NIL };
        let above = if q != NIL && s.node(q).free { q } else { NIL };
        match (below != NIL, above != NIL) {
            (true, true) => {
                // In-order neighbours in the free tree (only `freed` lay
                // between them): one is an ancestor of the other, and the
                // lower one has no child on the inner side. Remove that one,
                // grow the other over both.
                let (bs, ae) = (s.node(below).start, s.node(above).end);
                let (kept, gone) = if s.node(below).right == NIL {
                    (above, below)
                } else {
                    (below, above)
                };
                // `kept` keeps its own outer tile link; the tile beyond
                // `gone` now borders it.
                let (outer_lo, outer_hi) = if kept == above {
                    (s.node(below).prev_tile, kept)
                } else {
                    (kept, s.node(above).next_tile)
                };
                // Grow `kept` first: every maximum from `kept` up becomes
                // max(old, merged), a raise only. `gone` is smaller than the
                // merged block, so once it is removed the recomputation from
                // its parent stops at `kept` or just above, instead of
                // lowering maxima above `kept` that the raise then restores.
                let k = s.node_mut(kept);
                k.start = bs;
                k.end = ae;
                self.tree.raise_aug(s, kept, ae - bs);
                self.tree.remove(s, gone);
                s.free_node(gone);
                Self::link(s, outer_lo, outer_hi);
                s.free_node(freed);
            }
            (true, false) => {
                let bs = s.node(below).start;
                s.node_mut(below).end = end;
                self.tree.raise_aug(s, below, end - bs);
                Self::link(s, below, q);
                s.free_node(freed);
            }
            (false, true) => {
                let ae = s.node(above).end;
                s.node_mut(above).start = start;
                self.tree.raise_aug(s, above, ae - start);
                Self::link(s, p, above);
                s.free_node(freed);
            }
            (false, false) => {
                // Busy on both sides: the node stays in the tiling list and
                // becomes the free block.
                let node = s.node_mut(freed);
                node.free = true;
                node.parked = false;
                self.tree.insert(s, freed);
            }
        }
    }

    /// Total free bytes (walks the tree).
    #[cfg(all(test, not(kmm_loom)))]
    pub(crate) fn free_bytes<S: NodeArena>(&self, s: &S) -> u64 {
        let mut total = 0;
        let mut i = self.tree.first(s);
        while i != NIL {
            total += s.node(i).end - s.node(i).start;
            i = self.tree.next(s, i);
        }
        total
    }

    /// Tree invariants plus maximality (no two blocks touch).
    pub(crate) fn check<S: NodeArena>(&self, s: &S) -> Result<(), &'static str> {
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

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use crate::node::{Pool, test_pool};

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

    fn blocks(t: &FreeTree, s: &Pool<64>) -> [(u64, u64); 4] {
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
        let mut s = test_pool::<64>();
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
        let mut s = test_pool::<64>();
        let mut t = FreeTree::new();
        t.insert_block(&mut s, 0, 10 * P).unwrap();
        let b = t.tree.root;
        let n = s.alloc_node().unwrap();
        t.carve(&mut s, b, 4 * P, 2 * P, n).unwrap();
        s.node_mut(n).start = 4 * P;
        s.node_mut(n).end = 6 * P;
        t.check(&s).unwrap();
        assert_eq!(blocks(&t, &s)[..2], [(0, 4), (6, 10)]);
        let (lo, hi) = (s.node(n).prev_tile, s.node(n).next_tile);
        assert_eq!((s.node(lo).start, s.node(hi).start), (0, 6 * P));
        assert_eq!((s.node(lo).next_tile, s.node(hi).prev_tile), (n, n));
        t.release(&mut s, n);
        t.check(&s).unwrap();
        assert_eq!(blocks(&t, &s)[..2], [(0, 10), (0, 0)]);
        assert_eq!(s.in_use(), 1);
        assert_eq!(t.free_bytes(&s), 10 * P);
    }

    /// Every tile from the lowest, checking both directions of each link.
    fn tiles(s: &Pool<64>, first: NodeIdx) -> ([(u64, u64, bool); 40], usize) {
        let mut out = [(0, 0, false); 40];
        let (mut i, mut prev, mut k) = (first, NIL, 0);
        while i != NIL {
            assert_eq!(s.node(i).prev_tile, prev);
            out[k] = (s.node(i).start / P, s.node(i).end / P, s.node(i).free);
            (prev, i, k) = (i, s.node(i).next_tile, k + 1);
        }
        (out, k)
    }

    #[test]
    fn tiling_list_follows_carves_and_every_merge_case() {
        let mut s = test_pool::<64>();
        let mut t = FreeTree::new();
        t.insert_block(&mut s, 0, 32 * P).unwrap();
        // 16 busy pages at 0, 2, 4, ... (a split each time but the first).
        let mut busy = [NIL; 16];
        for (k, n) in busy.iter_mut().enumerate() {
            let a = 2 * k as u64 * P;
            let mut v = 0;
            let b = t.containing(&s, a, P, &mut v).unwrap();
            *n = s.alloc_node().unwrap();
            t.carve(&mut s, b, a, P, *n).unwrap();
            s.node_mut(*n).start = a;
            s.node_mut(*n).end = a + P;
            t.check(&s).unwrap();
        }
        let (ts, len) = tiles(&s, busy[0]);
        assert_eq!(len, 32);
        assert!(
            ts[..32]
                .iter()
                .enumerate()
                .all(|(k, &(a, e, f))| { a == k as u64 && e == a + 1 && f == (k % 2 == 1) })
        );
        // Free the first (merge above only), then 2, 4, ... (both sides);
        // every merge must leave the links and subtree maxima consistent.
        for &n in &busy {
            t.release(&mut s, n);
            t.check(&s).unwrap();
        }
        let first = t.tree.first(&s);
        assert_eq!(tiles(&s, first).0[..1], [(0, 32, true)]);
        assert_eq!(tiles(&s, first).1, 1);
        assert_eq!(s.in_use(), 1);
    }

    #[test]
    fn release_between_busy_areas_reuses_the_node() {
        let mut s = test_pool::<64>();
        let mut t = FreeTree::new();
        t.insert_block(&mut s, 0, 3 * P).unwrap();
        let mut nodes = [NIL; 3];
        for (k, n) in nodes.iter_mut().enumerate() {
            let a = k as u64 * P;
            let mut v = 0;
            let b = t.containing(&s, a, P, &mut v).unwrap();
            *n = s.alloc_node().unwrap();
            t.carve(&mut s, b, a, P, *n).unwrap();
            s.node_mut(*n).start = a;
            s.node_mut(*n).end = a + P;
        }
        assert_eq!(t.tree.len, 0);
        // The middle one: busy on both sides, so its node becomes the block.
        t.release(&mut s, nodes[1]);
        t.check(&s).unwrap();
        assert_eq!(t.tree.root, nodes[1]);
        assert_eq!(
            tiles(&s, nodes[0]).0[..3],
            [(0, 1, false), (1, 2, true), (2, 3, false)]
        );
        assert_eq!(s.in_use(), 3);
    }

    #[test]
    fn carve_split_reports_exhaustion_unchanged() {
        let mut s = test_pool::<1>();
        let mut t = FreeTree::new();
        t.insert_block(&mut s, 0, 10 * P).unwrap();
        let b = t.tree.root;
        assert_eq!(
            t.carve(&mut s, b, 4 * P, P, NIL),
            Err(VmapError::NodePoolExhausted)
        );
        assert_eq!(t.free_bytes(&s), 10 * P);
        t.check(&s).unwrap();
    }
}
