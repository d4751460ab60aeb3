//! How the tree changes shape, off the hot path: splits (growing the root),
//! unlinking emptied nodes (shrinking it), and the general insert and
//! remove that need them, which find a node's place through parent links
//! rather than the descent path `alloc` and `free` keep.

use super::{B, BlockTree, Inner, NONE, Rec, Slot};
use crate::error::VmapError;
use alloc::vec::Vec;

impl Inner {
    /// Which child `node` is: the tree's parent links say it is one.
    fn slot_of(&self, node: u32) -> usize {
        let slot = self.child[..self.n].iter().position(|&x| x == node);
        slot.expect("a node is a child of its parent")
    }
}

impl BlockTree {
    /// Re-derives the largest gap of `node` (at `height`) in its parent and
    /// up, stopping where nothing changes.
    fn update_gaps(&mut self, mut node: u32, mut height: usize) {
        let mut gap = if height == 0 {
            self.leaf_gap(node)
        } else {
            let n = &self.inners[node as usize];
            n.max_gap()
        };
        loop {
            let Some((parent, c)) = self.up(node, height) else {
                return;
            };
            let p = &mut self.inners[parent as usize];
            if p.gap[c] == gap {
                return;
            }
            p.gap[c] = gap;
            gap = p.max_gap();
            node = parent;
            height += 1;
        }
    }

    /// `node`'s parent and which child of it `node` is; `None` at the root.
    fn up(&self, node: u32, height: usize) -> Option<(u32, usize)> {
        let parent = self.parent(node, height);
        (parent != NONE).then(|| (parent, self.inners[parent as usize].slot_of(node)))
    }

    pub(super) fn parent(&self, node: u32, height: usize) -> u32 {
        if height == 0 {
            self.leaves[node as usize].parent
        } else {
            self.inners[node as usize].parent
        }
    }

    fn set_parent(&mut self, node: u32, height: usize, parent: u32) {
        if height == 0 {
            self.leaves[node as usize].parent = parent;
        } else {
            self.inners[node as usize].parent = parent;
        }
    }

    /// Inserts `[a, e)` before slot `s` (the gap before it holds it) of a
    /// full leaf, which splits first.
    ///
    /// Into the gap before the sentinel (a space filling up from the
    /// bottom), the split keeps all but the sentinel on the left, and so
    /// does each parent it adds a last child to: halves would leave every
    /// node of a filled space half full and the tree a level taller.
    pub(super) fn insert_splitting(&mut self, s: Slot, r: Rec) {
        let Slot { mut leaf, mut i } = s;
        let append = i == B - 1 && self.leaves[leaf as usize].next == NONE;
        let h = if append { B - 1 } else { B / 2 };
        let right = self.split_leaf(leaf, h, append);
        if i >= h {
            leaf = right;
            i -= h;
        }
        let l = &mut self.leaves[leaf as usize];
        l.rec.copy_within(i..l.n, i + 1);
        l.rec[i] = r;
        l.n += 1;
        if i == 0 {
            self.lower_key(leaf, r.start);
        }
        self.update_gaps(leaf, 0);
    }

    /// Makes sure the separator in front of `leaf` is at most `key`.
    fn lower_key(&mut self, mut node: u32, key: u64) {
        let mut height = 0;
        loop {
            let Some((parent, c)) = self.up(node, height) else {
                return;
            };
            let p = &mut self.inners[parent as usize];
            if c > 0 {
                p.key[c] = p.key[c].min(key);
                return;
            }
            node = parent;
            height += 1;
        }
    }

    /// Splits a full leaf in two, `h` records staying; returns the new
    /// right part, linked in (`append`: see `insert_splitting`).
    fn split_leaf(&mut self, leaf: u32, h: usize, append: bool) -> u32 {
        let l = &mut self.leaves[leaf as usize];
        let mut r = l.clone();
        r.n = B - h;
        r.rec.copy_within(h..B, 0);
        r.rec[B - h..].fill(Rec::UNUSED);
        r.prev_end = l.rec[h - 1].end;
        l.n = h;
        l.rec[h..].fill(Rec::UNUSED);
        let key = r.rec[0].start;
        let parent = l.parent;
        let right = Self::take(&mut self.leaves, &mut self.free_leaves, r);
        self.leaves[leaf as usize].next = right;
        self.attach(leaf, right, 0, key, parent, append);
        self.update_gaps(leaf, 0);
        self.update_gaps(right, 0);
        right
    }

    /// Makes room for a split all the way up (a leaf, an inner node per
    /// level, a new root) and for the free lists to take back every node,
    /// so that neither the split nor a later unlink allocates: a space
    /// that cannot grow refuses an allocation rather than panic.
    pub(super) fn reserve_split(&mut self) -> Result<(), VmapError> {
        let none = |_| VmapError::NodePoolExhausted;
        let (fl, fi) = (self.free_leaves.len(), self.free_inners.len());
        // Nodes on the free lists are taken first: only the rest is new.
        let leaves = 1usize.saturating_sub(fl);
        let inners = (self.height + 1).saturating_sub(fi);
        self.leaves.try_reserve(leaves).map_err(none)?;
        self.inners.try_reserve(inners).map_err(none)?;
        // Room for every node on the free lists: capacity, not `len` more
        // (an unlink between this and the split must not need more).
        let (l, i) = (self.leaves.len() + leaves, self.inners.len() + inners);
        self.free_leaves.try_reserve(l - fl).map_err(none)?;
        self.free_inners.try_reserve(i - fi).map_err(none)
    }

    fn take<T>(v: &mut Vec<T>, free: &mut Vec<u32>, x: T) -> u32 {
        match free.pop() {
            Some(i) => {
                v[i as usize] = x;
                i
            }
            None => {
                v.push(x);
                (v.len() - 1) as u32
            }
        }
    }

    /// Links `right` (at `height`, first key `key`) into `parent` after
    /// `left`, splitting parents and growing the root as needed.
    fn attach(
        &mut self,
        left: u32,
        right: u32,
        height: usize,
        key: u64,
        parent: u32,
        append: bool,
    ) {
        if parent == NONE {
            let mut root = Inner {
                n: 2,
                child: [NONE; B],
                key: [u64::MAX; B],
                gap: [0; B],
                parent: NONE,
            };
            root.child[0] = left;
            root.child[1] = right;
            root.key[0] = 0;
            root.key[1] = key;
            let r = Self::take(&mut self.inners, &mut self.free_inners, root);
            self.set_parent(left, height, r);
            self.set_parent(right, height, r);
            self.root = r;
            self.height = height + 1;
            // Both gaps are filled in by the caller's `update_gaps`.
            return;
        }
        let mut p = parent;
        let mut pos = {
            let n = &self.inners[p as usize];
            n.slot_of(left) + 1
        };
        if self.inners[p as usize].n == B {
            let h = if append && pos == B { B - 1 } else { B / 2 };
            let q = self.split_inner(p, height + 1, h, append);
            // At `h` exactly, `right` ends `p` rather than starting `q`,
            // whose separator is already set above.
            if pos > h {
                p = q;
                pos -= h;
            }
        }
        let n = &mut self.inners[p as usize];
        n.child.copy_within(pos..n.n, pos + 1);
        n.key.copy_within(pos..n.n, pos + 1);
        n.gap.copy_within(pos..n.n, pos + 1);
        n.child[pos] = right;
        n.key[pos] = key;
        n.gap[pos] = 0;
        n.n += 1;
        self.set_parent(right, height, p);
    }

    /// Splits a full inner node at `height`, `h` children staying;
    /// returns the new right part.
    fn split_inner(&mut self, node: u32, height: usize, h: usize, append: bool) -> u32 {
        let n = &mut self.inners[node as usize];
        let mut r = n.clone();
        r.n = B - h;
        r.child.copy_within(h..B, 0);
        r.key.copy_within(h..B, 0);
        r.gap.copy_within(h..B, 0);
        r.gap[B - h..].fill(0);
        r.key[B - h..].fill(u64::MAX);
        n.gap[h..].fill(0);
        n.key[h..].fill(u64::MAX);
        n.n = h;
        let key = r.key[0];
        let parent = n.parent;
        let right = Self::take(&mut self.inners, &mut self.free_inners, r);
        for c in 0..B - h {
            let child = self.inners[right as usize].child[c];
            self.set_parent(child, height - 1, right);
        }
        self.attach(node, right, height, key, parent, append);
        self.update_gaps(node, height);
        self.update_gaps(right, height);
        right
    }

    /// Removes a leaf's only record (never the sentinel's leaf): the gap
    /// before it and the record's span join the next leaf's first gap, and
    /// the leaf goes.
    pub(super) fn remove_leaf(&mut self, leaf: u32) {
        let l = &mut self.leaves[leaf as usize];
        l.n = 0;
        let (prev_end, next) = (l.prev_end, l.next);
        self.leaves[next as usize].prev_end = prev_end;
        self.update_gaps(next, 0);
        self.unlink(leaf, 0);
    }

    /// Unlinks an empty node (never the last leaf: it holds the sentinel).
    fn unlink(&mut self, node: u32, height: usize) {
        if height == 0 {
            // The leaf before points past it.
            let prev = self.prev_leaf(node);
            let next = self.leaves[node as usize].next;
            if prev != NONE {
                self.leaves[prev as usize].next = next;
            }
            self.free_leaves.push(node);
        } else {
            self.free_inners.push(node);
        }
        let parent = self.parent(node, height);
        let p = &mut self.inners[parent as usize];
        let c = p.slot_of(node);
        p.child.copy_within(c + 1..p.n, c);
        p.key.copy_within(c + 1..p.n, c);
        p.gap.copy_within(c + 1..p.n, c);
        p.n -= 1;
        p.gap[p.n] = 0;
        p.key[p.n] = u64::MAX;
        let left = p.n;
        if left == 0 {
            self.unlink(parent, height + 1);
        } else {
            self.update_gaps(parent, height + 1);
            // A root with one child: the child is the root (and so on down,
            // as thinned-out nodes are not merged).
            while self.height > 0 && self.inners[self.root as usize].n == 1 {
                let old = self.root;
                self.root = self.inners[old as usize].child[0];
                self.free_inners.push(old);
                self.height -= 1;
                self.set_parent(self.root, self.height, NONE);
            }
        }
    }

    /// The leaf before `leaf` in address order, or `NONE`.
    pub(super) fn prev_leaf(&self, leaf: u32) -> u32 {
        // Walk up until `leaf`'s ancestor has a left sibling, then down its
        // rightmost edge.
        let (mut node, mut height) = (leaf, 0);
        loop {
            let Some((parent, c)) = self.up(node, height) else {
                return NONE;
            };
            let p = &self.inners[parent as usize];
            if c > 0 {
                let mut down = p.child[c - 1];
                for _ in 0..height {
                    let n = &self.inners[down as usize];
                    down = n.child[n.n - 1];
                }
                return down;
            }
            node = parent;
            height += 1;
        }
    }
}
