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

use super::{BusyTree, FreeAreaSearch, Search};
use crate::error::VmapError;
use crate::node::{NIL, NodeArena, NodeIdx, TreeNode};
use crate::request::Fit;

/// Slots per node.
const F: usize = 12;
/// Deepest tree the path holds (see the module docs: well above reach).
const MAXD: usize = 24;

/// One node: four cache lines (`K` table slots).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct BNode {
    len: u32,
    /// 1 for a leaf.
    leaf: u32,
    /// Leaf: block starts. Inner: lowest block start below the slot.
    lo: [u64; F],
    /// Leaf: block ends. Inner: largest block size below the slot.
    hi: [u64; F],
    /// Inner: the child. Leaf: the busy area just below the block (ending
    /// at its start; `NIL` at the start of the space), so an allocation
    /// names its busy predecessor without a search of the busy tree.
    kid: [NodeIdx; F],
    _pad: [u32; 2],
}

/// Table slots per node.
const K: u32 = (core::mem::size_of::<BNode>() / core::mem::size_of::<TreeNode>()) as u32;
const _: () = assert!(core::mem::size_of::<BNode>() == K as usize * 64);
const _: () = assert!(core::mem::align_of::<BNode>() == core::mem::align_of::<TreeNode>());

impl BNode {
    const EMPTY: Self = Self {
        len: 0,
        leaf: 1,
        lo: [0; F],
        hi: [0; F],
        kid: [NIL; F],
        _pad: [0; 2],
    };

    /// The largest free block below this node. Slots past `len` hold
    /// zeros, so the loop has a fixed length (no branches, vectorised).
    #[inline]
    fn max(&self) -> u64 {
        let mut m = 0;
        if self.leaf != 0 {
            for j in 0..F {
                m = m.max(self.hi[j] - self.lo[j]);
            }
        } else {
            for j in 0..F {
                m = m.max(self.hi[j]);
            }
        }
        m
    }

    /// Slots `0..len` with `lo <= key` (they come first: `lo` is sorted).
    #[inline]
    fn rank(&self, key: u64) -> usize {
        let n = self.len as usize;
        let mut r = 0;
        while r < n && self.lo[r] <= key {
            r += 1;
        }
        r
    }

    /// Opens slot `pos` (shifting the rest up) and writes it.
    #[inline]
    fn insert(&mut self, pos: usize, lo: u64, hi: u64, kid: NodeIdx) {
        let n = self.len as usize;
        self.lo.copy_within(pos..n, pos + 1);
        self.hi.copy_within(pos..n, pos + 1);
        self.kid.copy_within(pos..n, pos + 1);
        (self.lo[pos], self.hi[pos], self.kid[pos]) = (lo, hi, kid);
        self.len += 1;
    }

    /// Closes slot `pos` (the freed last slot is zeroed).
    #[inline]
    fn remove(&mut self, pos: usize) {
        let n = self.len as usize;
        self.lo.copy_within(pos + 1..n, pos);
        self.hi.copy_within(pos + 1..n, pos);
        self.kid.copy_within(pos + 1..n, pos);
        (self.lo[n - 1], self.hi[n - 1], self.kid[n - 1]) = (0, 0, NIL);
        self.len -= 1;
    }
}

#[inline]
fn get<S: NodeArena>(s: &S, i: NodeIdx) -> &BNode {
    // SAFETY: `i` is a run of `K` slots this policy allocated and
    // initialised with a whole `BNode` (`new_node`), not yet freed; `run`
    // checked the bounds and gives 64-byte alignment, `BNode`'s. Only this
    // policy reaches these slots, and the borrow of `s` keeps the table from
    // changing while the reference lives.
    unsafe { &*s.run(i, K).cast::<BNode>() }
}

#[inline]
fn get_mut<S: NodeArena>(s: &mut S, i: NodeIdx) -> &mut BNode {
    // SAFETY: as `get`, exclusive through `&mut S`.
    unsafe { &mut *s.run_mut(i, K).cast::<BNode>() }
}

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

impl BTree {
    /// A node initialised as an empty leaf (from the reserve first).
    fn new_node<S: NodeArena>(&mut self, s: &mut S) -> Option<NodeIdx> {
        let i = if self.nspare > 0 {
            self.nspare -= 1;
            self.spare[self.nspare]
        } else {
            s.alloc_run(K)?
        };
        // SAFETY: a run of `K` slots just taken for this policy, in bounds
        // and aligned (`run_mut`); writing a whole `BNode` initialises it.
        unsafe { s.run_mut(i, K).cast::<BNode>().write(BNode::EMPTY) };
        Some(i)
    }

    /// Tops the reserve up to `depth + 1` spares; `false` if the source ran
    /// out (what was taken stays in the reserve).
    fn fill_reserve<S: NodeArena>(&mut self, s: &mut S) -> bool {
        while self.nspare < (self.depth + 1).min(MAXD + 1) {
            match s.alloc_run(K) {
                Some(i) => {
                    self.spare[self.nspare] = i;
                    self.nspare += 1;
                }
                None => return false,
            }
        }
        true
    }

    /// Walks from the root towards `key`: at each level the last slot whose
    /// lowest start is at most `key` (or the first). Fills the path; returns
    /// the leaf's rank of `key` and the lowest start after the leaf (the
    /// next subtree's, `u64::MAX` if none).
    fn descend<S: NodeArena>(&mut self, s: &S, key: u64, visited: &mut u32) -> (usize, u64) {
        let mut i = self.root;
        let mut next = u64::MAX;
        for l in 0..self.depth {
            *visited += 1;
            let n = get(s, i);
            let r = n.rank(key);
            if n.leaf != 0 {
                self.path[l] = (i, r);
                return (r, next);
            }
            let j = r.saturating_sub(1);
            if j + 1 < n.len as usize {
                next = n.lo[j + 1];
            }
            self.path[l] = (i, j);
            i = n.kid[j];
        }
        unreachable!("the tree's depth counts its levels")
    }

    /// The lowest fit below node `i` (at level `l`); fills the path.
    fn search<S: NodeArena>(
        &mut self,
        s: &S,
        i: NodeIdx,
        l: usize,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<u64> {
        *visited += 1;
        let n = get(s, i);
        let len = n.len as usize;
        // Slots below the one holding `vstart` end at or before the next
        // slot's start, so at or below `vstart`: nothing there. (An empty
        // root, in a full space, has rank 0: hence the saturation.)
        let first = if fit.vstart > n.lo[0] {
            n.rank(fit.vstart).saturating_sub(1)
        } else {
            0
        };
        for j in first..len {
            let big = if n.leaf != 0 {
                n.hi[j] - n.lo[j]
            } else {
                n.hi[j]
            };
            if big < fit.size {
                continue;
            }
            if n.lo[j] >= fit.vend {
                return None;
            }
            let found = if n.leaf != 0 {
                fit.fit_in(n.lo[j], n.hi[j])
            } else {
                self.search(s, n.kid[j], l + 1, fit, visited)
            };
            if found.is_some() {
                self.path[l] = (i, j);
                return found;
            }
        }
        None
    }

    /// Refreshes the parent slots above level `l` (lowest start, largest
    /// block) along the path; stops where nothing changed. `hint`: the one
    /// value of the node at level `l` that changed, `(old, new)` (a block's
    /// size in a leaf), so its largest block is rescanned only when the
    /// largest one shrank; `None` after a change of shape (rescan).
    fn fix_up<S: NodeArena>(&self, s: &mut S, mut l: usize, mut hint: Option<(u64, u64)>) {
        while l > 0 {
            let (p, j) = self.path[l - 1];
            let pm = get(s, p).hi[j];
            let c = get(s, self.path[l].0);
            let max = match hint {
                Some((_, new)) if new >= pm => new,
                Some((old, _)) if old < pm => pm,
                _ => c.max(),
            };
            let lo = c.lo[0];
            let pn = get_mut(s, p);
            if pn.lo[j] == lo && pm == max {
                return;
            }
            (pn.lo[j], pn.hi[j]) = (lo, max);
            hint = Some((pm, max));
            l -= 1;
        }
    }

    /// Writes `(lo, hi, kid)` into slot `pos` of the node at level `l` of
    /// the path, splitting full nodes upwards (nodes from the reserve or
    /// the source).
    fn insert_at<S: NodeArena>(
        &mut self,
        s: &mut S,
        l: usize,
        pos: usize,
        e: (u64, u64, NodeIdx),
        hint: Option<(u64, u64)>,
    ) {
        let i = self.path[l].0;
        if (get(s, i).len as usize) < F {
            get_mut(s, i).insert(pos, e.0, e.1, e.2);
            self.fix_up(s, l, hint);
            return;
        }
        let r = self
            .new_node(s)
            .expect("vmap-core btree: the reserve holds a node per level and one for a new root");
        // F + 1 entries: the lower 7 stay, the upper 6 move to `r`.
        let old = *get(s, i);
        let mut tmp = [(0u64, 0u64, NIL); F + 1];
        for (j, t) in tmp.iter_mut().enumerate().take(F) {
            *t = (old.lo[j], old.hi[j], old.kid[j]);
        }
        tmp.copy_within(pos..F, pos + 1);
        tmp[pos] = e;
        let keep = F / 2 + 1;
        let n = get_mut(s, i);
        *n = BNode {
            leaf: n.leaf,
            ..BNode::EMPTY
        };
        for &(a, b, k) in &tmp[..keep] {
            let at = n.len as usize;
            n.insert(at, a, b, k);
        }
        let leaf = n.leaf;
        let lmax = n.max();
        let llo = n.lo[0];
        let rn = get_mut(s, r);
        rn.leaf = leaf;
        for &(a, b, k) in &tmp[keep..] {
            let at = rn.len as usize;
            rn.insert(at, a, b, k);
        }
        let (rlo, rmax) = (rn.lo[0], rn.max());
        if l == 0 {
            let q = self.new_node(s).expect(
                "vmap-core btree: the reserve holds a node per level and one for a new root",
            );
            let qn = get_mut(s, q);
            qn.leaf = 0;
            qn.insert(0, llo, lmax, i);
            qn.insert(1, rlo, rmax, r);
            self.root = q;
            self.depth += 1;
            return;
        }
        let (p, j) = self.path[l - 1];
        let pn = get_mut(s, p);
        (pn.lo[j], pn.hi[j]) = (llo, lmax);
        self.insert_at(s, l - 1, j + 1, (rlo, rmax, r), None);
    }

    /// Closes slot `pos` of the node at level `l` of the path; an emptied
    /// node is unlinked and freed, a root with one child dropped.
    fn remove_at<S: NodeArena>(&mut self, s: &mut S, l: usize, pos: usize) {
        let i = self.path[l].0;
        let n = get_mut(s, i);
        n.remove(pos);
        if n.len > 0 || l == 0 {
            if l == 0 && n.len == 0 {
                // Everything below is gone: the root is an empty leaf.
                n.leaf = 1;
                self.depth = 1;
            } else {
                self.fix_up(s, l, None);
            }
            self.collapse(s);
            return;
        }
        s.free_run(i, K);
        let j = self.path[l - 1].1;
        self.remove_at(s, l - 1, j);
    }

    /// Drops inner roots with a single child.
    fn collapse<S: NodeArena>(&mut self, s: &mut S) {
        while self.depth > 1 && get(s, self.root).len == 1 {
            let old = self.root;
            self.root = get(s, old).kid[0];
            self.depth -= 1;
            s.free_run(old, K);
        }
    }

    /// Calls `f` on every free block in address order, checking the tree's
    /// shape on the way; returns the subtree's (lowest start, largest block).
    fn walk<S: NodeArena>(
        &self,
        s: &S,
        i: NodeIdx,
        l: usize,
        f: &mut impl FnMut(u64, u64, NodeIdx) -> Result<(), &'static str>,
    ) -> Result<(u64, u64), &'static str> {
        let n = get(s, i);
        let len = n.len as usize;
        if len == 0 && l > 0 {
            return Err("btree: empty node below the root");
        }
        if (n.leaf != 0) != (l + 1 == self.depth) {
            return Err("btree: leaves at different depths");
        }
        for j in 1..len {
            if n.lo[j] <= n.lo[j - 1] {
                return Err("btree: slots out of order");
            }
        }
        if n.leaf != 0 {
            for j in 0..len {
                f(n.lo[j], n.hi[j], n.kid[j])?;
            }
        } else {
            for j in 0..len {
                let (lo, max) = self.walk(s, n.kid[j], l + 1, f)?;
                if (lo, max) != (n.lo[j], n.hi[j]) {
                    return Err("btree: a slot's lowest start or largest block is stale");
                }
            }
        }
        Ok((n.lo[0], n.max()))
    }
}

impl Search for BTree {
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
        _: &BusyTree,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<u64> {
        self.search(s, self.root, 0, fit, visited)
    }

    fn find_exact<S: NodeArena>(
        &mut self,
        s: &S,
        _: &BusyTree,
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
        busy: &BusyTree,
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

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use crate::node::{Pool, test_pool};
    use crate::tree::Tree;

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

    /// A tree over `[0, pages)` with the pages `busy` says taken, one by
    /// one through the policy (claims of single pages).
    fn with_busy(s: &mut Pool<4096>, pages: u64, busy: impl Iterator<Item = u64>) -> BTree {
        let mut t = BTree::init(s, 0, pages * P).unwrap();
        let empty: BusyTree = Tree::new();
        for p in busy {
            let mut v = 0;
            assert!(t.find_exact(s, &empty, p * P, P, &mut v));
            t.claim(s, p * P, P, NIL).unwrap();
        }
        t
    }

    fn blocks(t: &BTree, s: &Pool<4096>) -> std::vec::Vec<(u64, u64)> {
        let mut out = std::vec::Vec::new();
        t.walk(s, t.root, 0, &mut |a, b, _| {
            out.push((a / P, b / P));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn one_node_is_four_cache_lines() {
        assert_eq!(K, 4);
        assert_eq!(core::mem::size_of::<BNode>(), 256);
    }

    /// 200 busy pages at every third page: 200 free blocks of two pages,
    /// three levels of nodes; lowest fit, alignment and windows agree with
    /// a scan of the blocks.
    #[test]
    fn lowest_fit_over_many_leaves_matches_a_scan() {
        let mut s = test_pool::<4096>();
        let mut t = with_busy(&mut s, 600, (0..200).map(|k| 3 * k));
        assert!(t.depth >= 3, "depth {}", t.depth);
        let bl = blocks(&t, &s);
        assert_eq!(bl.len(), 200);
        assert_eq!(bl[0], (1, 3));
        // Grow one hole to 8 pages high up: the only fit for 5 pages.
        for p in [450, 453] {
            t.release(&mut s, p * P, (p + 1) * P, NIL, NIL);
        }
        let mut v = 0;
        let empty: BusyTree = Tree::new();
        assert_eq!(
            t.find_fit(&s, &empty, &fit(5 * P, P), &mut v),
            Some(448 * P)
        );
        assert_eq!(t.find_fit(&s, &empty, &fit(2 * P, P), &mut v), Some(P));
        // Aligned to 4 pages: the first 2-page hole at a multiple of 4.
        assert_eq!(
            t.find_fit(&s, &empty, &fit(2 * P, 4 * P), &mut v),
            Some(4 * P)
        );
        let mut w = fit(P, P);
        w.vstart = 300 * P;
        assert_eq!(t.find_fit(&s, &empty, &w, &mut v), Some(301 * P));
        w.vend = 301 * P;
        assert_eq!(t.find_fit(&s, &empty, &w, &mut v), None);
        assert_eq!(t.find_fit(&s, &empty, &fit(9 * P, P), &mut v), None);
    }

    /// Freeing every busy page in a shuffled order merges all blocks back
    /// into one, crossing leaf boundaries both ways, and gives every node
    /// but the root back.
    #[test]
    fn frees_merge_across_leaves_and_return_nodes() {
        let mut s = test_pool::<4096>();
        let mut t = with_busy(&mut s, 601, (0..300).map(|k| 2 * k + 1));
        let depth = t.depth;
        assert!(depth >= 3);
        let mut order: std::vec::Vec<u64> = (0..300).map(|k| 2 * k + 1).collect();
        let mut x = 7u64;
        for i in (1..order.len()).rev() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            order.swap(i, (x >> 33) as usize % (i + 1));
        }
        for (n, &p) in order.iter().enumerate() {
            t.release(&mut s, p * P, (p + 1) * P, NIL, NIL);
            if n % 37 == 0 {
                let mut prev = 0;
                for (a, b) in blocks(&t, &s) {
                    assert!(a > prev || a == 0, "{a} after {prev}");
                    prev = b;
                }
            }
        }
        assert_eq!(blocks(&t, &s), [(0, 601)]);
        assert_eq!(t.depth, 1);
        assert_eq!(s.in_use(), (K as usize) * (1 + t.nspare));
    }

    /// Taking every page one by one from the front empties the leaves
    /// below the root one after another.
    #[test]
    fn claims_that_empty_leaves_unlink_them() {
        let mut s = test_pool::<4096>();
        let mut t = with_busy(&mut s, 400, (0..100).map(|k| 4 * k));
        let empty: BusyTree = Tree::new();
        loop {
            let mut v = 0;
            let Some(a) = t.find_fit(&s, &empty, &fit(P, P), &mut v) else {
                break;
            };
            t.claim(&mut s, a, P, NIL).unwrap();
        }
        assert!(blocks(&t, &s).is_empty());
        assert_eq!(t.depth, 1);
        t.release(&mut s, 5 * P, 6 * P, NIL, NIL);
        assert_eq!(blocks(&t, &s), [(5, 6)]);
    }

    #[test]
    fn claim_reports_exhaustion_unchanged() {
        let mut s = test_pool::<8>();
        let mut t = BTree::init(&mut s, 0, 10 * P).unwrap();
        let empty: BusyTree = Tree::new();
        let mut v = 0;
        assert_eq!(t.find_fit(&s, &empty, &fit(P, P), &mut v), Some(0));
        // The reserve wants two more nodes: the 8-slot pool has one.
        assert_eq!(
            t.claim(&mut s, 0, P, NIL),
            Err(VmapError::NodePoolExhausted)
        );
        let n = get(&s, t.root);
        assert_eq!((n.len, n.lo[0], n.hi[0]), (1, 0, 10 * P));
    }
}
