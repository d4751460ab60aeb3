//! The lowest-fit search: down the children whose largest gap is large
//! enough, to the first gap of a leaf that holds the request, back up to
//! the next sibling when alignment or bounds rule a subtree's gaps out.

use super::{BlockTree, Path, Slot};
use crate::request::Fit;

impl BlockTree {
    /// Lowest fit for `fit`: the slot before which it goes, its address and
    /// the gap it goes into, by the plain search when the request is one.
    pub(super) fn search(&self, path: &mut Path, fit: &Fit) -> Option<(Slot, u64, u64)> {
        let whole =
            fit.phase == 0 && fit.nocross == 0 && fit.vstart == self.start && fit.vend == self.end;
        if whole {
            self.find_whole(path, fit.size, fit.align)
        } else {
            self.find(path, fit)
        }
    }

    /// Lowest fit for a plain request (size and alignment, anywhere in the
    /// space): the slot before which it goes, its address and the gap it
    /// goes into; `path` is left holding the way down. A subtree whose
    /// largest gap is too small is not entered; one whose gaps alignment
    /// rules out is left for its next sibling.
    pub(super) fn find_whole(
        &self,
        path: &mut Path,
        size: u64,
        align: u64,
    ) -> Option<(Slot, u64, u64)> {
        let (mut node, mut k, mut from) = (self.root, 0, 0);
        loop {
            if k < self.height {
                let n = &self.inners[node as usize];
                // Unused slots' gaps are 0, less than any size: no need to
                // stop at `n.n`.
                if let Some(c) = n.gap[from..].iter().position(|&g| g >= size) {
                    let c = from + c;
                    path.node[k] = node;
                    path.pos[k] = c as u8;
                    (node, k, from) = (n.child[c], k + 1, 0);
                    continue;
                }
            } else {
                let l = &self.leaves[node as usize];
                let mut gs = l.prev_end;
                for (i, r) in l.rec[..l.n].iter().enumerate() {
                    let (ge, e) = (r.start, r.end);
                    if ge - gs >= size {
                        let a = gs.checked_add(align - 1).map(|x| x & !(align - 1));
                        if let Some(a) = a.filter(|&a| a <= ge && ge - a >= size) {
                            return Some((Slot { leaf: node, i }, a, ge - gs));
                        }
                    }
                    gs = e;
                }
            }
            // Nothing here: the next sibling up the path.
            k = k.checked_sub(1)?;
            (node, from) = (path.node[k], path.pos[k] as usize + 1);
        }
    }

    /// [`find_whole`](Self::find_whole) for any request: subtrees that lie
    /// wholly outside `[vstart, vend)` are not entered either, and a gap
    /// must hold an address `fit` accepts.
    pub(super) fn find(&self, path: &mut Path, fit: &Fit) -> Option<(Slot, u64, u64)> {
        let (size, vstart, vend) = (fit.size, fit.vstart, fit.vend);
        let (mut node, mut k, mut from) = (self.root, 0, 0);
        loop {
            if k == self.height {
                let l = &self.leaves[node as usize];
                let mut prev = l.prev_end;
                for i in 0..l.n {
                    let (gs, ge) = (prev, l.rec[i].start);
                    prev = l.rec[i].end;
                    if ge - gs < size || ge <= vstart {
                        continue;
                    }
                    if gs >= vend {
                        break;
                    }
                    if let Some(a) = fit.fit_in(gs, ge) {
                        return Some((Slot { leaf: node, i }, a, ge - gs));
                    }
                }
            } else {
                // Child `c` holds the gaps before starts in `[key[c],
                // key[c + 1])`: none reaches past `vstart` if `key[c + 1] <=
                // vstart`; the first child whose `key[c] >= vend` is the
                // last whose first gap may still begin below `vend`.
                let n = &self.inners[node as usize];
                let mut found = None;
                for c in from..n.n {
                    if c >= 2 && n.key[c - 1] >= vend {
                        break;
                    }
                    if n.gap[c] >= size && (c + 1 == n.n || n.key[c + 1] > vstart) {
                        found = Some(c);
                        break;
                    }
                }
                if let Some(c) = found {
                    path.node[k] = node;
                    path.pos[k] = c as u8;
                    (node, k, from) = (n.child[c], k + 1, 0);
                    continue;
                }
            }
            // Nothing here: the next sibling up the path.
            k = k.checked_sub(1)?;
            (node, from) = (path.node[k], path.pos[k] as usize + 1);
        }
    }
}
