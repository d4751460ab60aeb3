//! The B-tree's own operations: the node reserve, descent, lowest-fit search, refreshing
//! the maxima, insert with splits, removal and collapse, and the walk behind `check`.

use super::BTree;
use super::node::{BNode, F, K, MAXD, get, get_mut};
use crate::node::{NIL, NodeArena, NodeIdx};
use crate::request::Fit;

impl BTree {
    /// A node initialised as an empty leaf (from the reserve first).
    pub(super) fn new_node<S: NodeArena>(&mut self, s: &mut S) -> Option<NodeIdx> {
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
    pub(super) fn fill_reserve<S: NodeArena>(&mut self, s: &mut S) -> bool {
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
    pub(super) fn descend<S: NodeArena>(
        &mut self,
        s: &S,
        key: u64,
        visited: &mut u32,
    ) -> (usize, u64) {
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
    pub(super) fn search<S: NodeArena>(
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
    pub(super) fn fix_up<S: NodeArena>(
        &self,
        s: &mut S,
        mut l: usize,
        mut hint: Option<(u64, u64)>,
    ) {
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
    pub(super) fn insert_at<S: NodeArena>(
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
    pub(super) fn remove_at<S: NodeArena>(&mut self, s: &mut S, l: usize, pos: usize) {
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
    pub(super) fn collapse<S: NodeArena>(&mut self, s: &mut S) {
        while self.depth > 1 && get(s, self.root).len == 1 {
            let old = self.root;
            self.root = get(s, old).kid[0];
            self.depth -= 1;
            s.free_run(old, K);
        }
    }

    /// Calls `f` on every free block in address order, checking the tree's
    /// shape on the way; returns the subtree's (lowest start, largest block).
    pub(super) fn walk<S: NodeArena>(
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
