//! The address-ordered AVL tree both trees are built on: nodes live in a
//! [`NodeArena`] and are linked by index (with parent links, so neighbours
//! are found without a second search — that is what makes `find_unlink` one
//! search). Keyed by `start`; the ranges in one tree never overlap, so the
//! order by `start` is also the order by `end`.
//!
//! The augmentation is a type parameter: the busy tree uses [`NoAug`], the
//! free tree [`MaxFree`] (each node knows the largest block in its subtree).
//! The rebalancing walk stops as soon as a subtree's height and subtree
//! maximum are unchanged, so most inserts and removals touch O(1) nodes above
//! the change.

use crate::node::{NIL, NodeArena, NodeIdx};
use core::marker::PhantomData;

/// What a tree keeps per subtree besides its height.
pub trait Augment {
    /// Whether `aug` (largest `end - start` in the subtree) is maintained.
    const ACTIVE: bool;
}

/// The busy tree: no augmentation.
pub struct NoAug;
impl Augment for NoAug {
    const ACTIVE: bool = false;
}

/// The free tree: subtree maximum of the block size.
pub struct MaxFree;
impl Augment for MaxFree {
    const ACTIVE: bool = true;
}

/// An AVL tree over nodes of a [`NodeArena`].
pub struct Tree<A> {
    pub(crate) root: NodeIdx,
    pub(crate) len: usize,
    _aug: PhantomData<A>,
}

#[inline]
fn height<S: NodeArena>(s: &S, i: NodeIdx) -> u8 {
    if i == NIL { 0 } else { s.node(i).height }
}

impl<A: Augment> Tree<A> {
    pub(crate) const fn new() -> Self {
        Self {
            root: NIL,
            len: 0,
            _aug: PhantomData,
        }
    }

    /// Recomputes height and augmentation of `i` from its children; returns
    /// whether either changed.
    #[inline]
    fn update<S: NodeArena>(s: &mut S, i: NodeIdx) -> bool {
        let n = s.node(i);
        let (l, r, own) = (n.left, n.right, n.end - n.start);
        let (lh, la) = if l == NIL {
            (0, 0)
        } else {
            (s.node(l).height, s.node(l).aug)
        };
        let (rh, ra) = if r == NIL {
            (0, 0)
        } else {
            (s.node(r).height, s.node(r).aug)
        };
        let h = 1 + lh.max(rh);
        let a = if A::ACTIVE { own.max(la).max(ra) } else { 0 };
        let n = s.node_mut(i);
        let changed = n.height != h || (A::ACTIVE && n.aug != a);
        n.height = h;
        if A::ACTIVE {
            n.aug = a;
        }
        changed
    }

    #[inline]
    fn replace_child<S: NodeArena>(
        &mut self,
        s: &mut S,
        parent: NodeIdx,
        old: NodeIdx,
        new: NodeIdx,
    ) {
        if parent == NIL {
            self.root = new;
        } else {
            let p = s.node_mut(parent);
            if p.left == old {
                p.left = new;
            } else {
                p.right = new;
            }
        }
        if new != NIL {
            s.node_mut(new).parent = parent;
        }
    }

    #[inline(always)]
    fn rotate_left<S: NodeArena>(&mut self, s: &mut S, x: NodeIdx) -> NodeIdx {
        let y = s.node(x).right;
        let b = s.node(y).left;
        let p = s.node(x).parent;
        s.node_mut(x).right = b;
        if b != NIL {
            s.node_mut(b).parent = x;
        }
        self.replace_child(s, p, x, y);
        s.node_mut(y).left = x;
        s.node_mut(x).parent = y;
        Self::update(s, x);
        Self::update(s, y);
        y
    }

    #[inline(always)]
    fn rotate_right<S: NodeArena>(&mut self, s: &mut S, x: NodeIdx) -> NodeIdx {
        let y = s.node(x).left;
        let b = s.node(y).right;
        let p = s.node(x).parent;
        s.node_mut(x).left = b;
        if b != NIL {
            s.node_mut(b).parent = x;
        }
        self.replace_child(s, p, x, y);
        s.node_mut(y).right = x;
        s.node_mut(x).parent = y;
        Self::update(s, x);
        Self::update(s, y);
        y
    }

    /// Restores the AVL balance at `i` (whose children are balanced);
    /// returns the root of the subtree.
    fn rebalance<S: NodeArena>(&mut self, s: &mut S, i: NodeIdx) -> NodeIdx {
        let (l, r) = (s.node(i).left, s.node(i).right);
        let bf = height(s, l) as i32 - height(s, r) as i32;
        if bf > 1 {
            if height(s, s.node(l).left) < height(s, s.node(l).right) {
                self.rotate_left(s, l);
            }
            self.rotate_right(s, i)
        } else if bf < -1 {
            if height(s, s.node(r).right) < height(s, s.node(r).left) {
                self.rotate_right(s, r);
            }
            self.rotate_left(s, i)
        } else {
            i
        }
    }

    /// Walks from `i` to the root updating heights/augmentation and
    /// rebalancing. Each node's children are read once: the balance check
    /// and the recomputation share them.
    #[inline(always)]
    fn fix_up<S: NodeArena>(&mut self, s: &mut S, mut i: NodeIdx) {
        while i != NIL {
            let n = s.node(i);
            let (l, r, own) = (n.left, n.right, n.end - n.start);
            let (lh, la) = if l == NIL {
                (0, 0)
            } else {
                (s.node(l).height, s.node(l).aug)
            };
            let (rh, ra) = if r == NIL {
                (0, 0)
            } else {
                (s.node(r).height, s.node(r).aug)
            };
            if lh > rh + 1 || rh > lh + 1 {
                // Rotations recompute the nodes they move.
                let top = self.rebalance(s, i);
                i = s.node(top).parent;
                continue;
            }
            let h = 1 + lh.max(rh);
            let a = if A::ACTIVE { own.max(la).max(ra) } else { 0 };
            let n = s.node_mut(i);
            if n.height == h && (!A::ACTIVE || n.aug == a) {
                // Height and subtree max unchanged, balanced: nothing above
                // can change.
                return;
            }
            n.height = h;
            if A::ACTIVE {
                n.aug = a;
            }
            i = n.parent;
        }
    }

    /// Recomputes the augmentation from `i` up after `i`'s `start`/`end`
    /// changed in place (order unchanged, so no rebalancing is needed).
    pub(crate) fn update_path<S: NodeArena>(&self, s: &mut S, mut i: NodeIdx) {
        while i != NIL {
            if !Self::update(s, i) {
                return;
            }
            i = s.node(i).parent;
        }
    }

    /// Raises the augmentation from `i` up to at least `v` after `i`'s block
    /// grew to `v` bytes, stopping at the first node that already covers it.
    /// Valid when the only other change below those nodes is the removal of
    /// blocks no larger than `v` (a neighbour `i` absorbed): each maximum is
    /// then exactly `max(old, v)`, so siblings need not be read.
    #[inline]
    pub(crate) fn raise_aug<S: NodeArena>(&self, s: &mut S, mut i: NodeIdx, v: u64) {
        if !A::ACTIVE {
            return;
        }
        while i != NIL {
            let n = s.node_mut(i);
            if n.aug >= v {
                return;
            }
            n.aug = v;
            i = n.parent;
        }
    }

    /// Links node `n` (its `start`/`end` set) into the tree. Its start must
    /// not already be present.
    pub(crate) fn insert<S: NodeArena>(&mut self, s: &mut S, n: NodeIdx) {
        let key = s.node(n).start;
        if self.insert_first(s, n) {
            return;
        }
        let mut cur = self.root;
        loop {
            let c = s.node(cur);
            let next = if key < c.start { c.left } else { c.right };
            if next == NIL {
                break;
            }
            cur = next;
        }
        if key < s.node(cur).start {
            s.node_mut(cur).left = n;
        } else {
            s.node_mut(cur).right = n;
        }
        s.node_mut(n).parent = cur;
        self.fix_up(s, cur);
    }

    /// Resets `n` as a leaf and counts it; links it as the root and returns
    /// `true` if the tree was empty.
    #[inline]
    fn insert_first<S: NodeArena>(&mut self, s: &mut S, n: NodeIdx) -> bool {
        let node = s.node_mut(n);
        node.left = NIL;
        node.right = NIL;
        node.height = 1;
        node.aug = node.end - node.start;
        self.len += 1;
        if self.root == NIL {
            self.root = n;
            s.node_mut(n).parent = NIL;
            return true;
        }
        false
    }

    /// Inserts `n` right after `pred`, its in-order predecessor (`NIL`: `n`
    /// becomes the lowest node), without searching from the root. A key has
    /// one place in a search tree, so this is where [`insert`](Self::insert)
    /// would put it: the right child of `pred` if that is free, otherwise
    /// the left child of `pred`'s successor (which has none).
    pub(crate) fn insert_after<S: NodeArena>(&mut self, s: &mut S, pred: NodeIdx, n: NodeIdx) {
        debug_assert!(pred == NIL || s.node(pred).start < s.node(n).start);
        if self.insert_first(s, n) {
            return;
        }
        let (parent, left) = if pred == NIL {
            (self.min_from(s, self.root), true)
        } else if s.node(pred).right == NIL {
            (pred, false)
        } else {
            (self.min_from(s, s.node(pred).right), true)
        };
        if left {
            s.node_mut(parent).left = n;
        } else {
            s.node_mut(parent).right = n;
        }
        s.node_mut(n).parent = parent;
        self.fix_up(s, parent);
    }

    /// Unlinks node `z` (the slot stays allocated; the caller frees it or
    /// links it again, its stale links must not be followed). No search:
    /// parent links give the position.
    #[inline(always)]
    pub(crate) fn remove<S: NodeArena>(&mut self, s: &mut S, z: NodeIdx) {
        self.len -= 1;
        let (zl, zr, zp, zh, za) = {
            let n = s.node(z);
            (n.left, n.right, n.parent, n.height, n.aug)
        };
        let fix_from;
        let mut yfix = NIL;
        if zl == NIL {
            self.replace_child(s, zp, z, zr);
            fix_from = zp;
        } else if zr == NIL {
            self.replace_child(s, zp, z, zl);
            fix_from = zp;
        } else {
            let y = self.min_from(s, zr);
            if s.node(y).parent == z {
                fix_from = y;
            } else {
                fix_from = s.node(y).parent;
                let yr = s.node(y).right;
                let yp = s.node(y).parent;
                self.replace_child(s, yp, y, yr);
                s.node_mut(y).right = zr;
                s.node_mut(zr).parent = y;
            }
            self.replace_child(s, zp, z, y);
            s.node_mut(y).left = zl;
            s.node_mut(zl).parent = y;
            let yn = s.node_mut(y);
            yn.height = zh;
            yn.aug = za;
            if A::ACTIVE {
                // y took z's place with its own size: the walk from fix_from
                // may stop below y, so recompute from y up (stopping once a
                // node is unchanged).
                yfix = y;
            }
        }
        // `z`'s own links are left as they were: every caller frees the slot
        // or relinks it (`insert` sets them).
        self.fix_up(s, fix_from);
        if yfix != NIL {
            self.update_path(s, yfix);
        }
    }

    #[inline]
    fn min_from<S: NodeArena>(&self, s: &S, mut i: NodeIdx) -> NodeIdx {
        while s.node(i).left != NIL {
            i = s.node(i).left;
        }
        i
    }

    #[inline]
    fn max_from<S: NodeArena>(&self, s: &S, mut i: NodeIdx) -> NodeIdx {
        while s.node(i).right != NIL {
            i = s.node(i).right;
        }
        i
    }

    /// Lowest node, or `NIL`.
    pub(crate) fn first<S: NodeArena>(&self, s: &S) -> NodeIdx {
        if self.root == NIL {
            NIL
        } else {
            self.min_from(s, self.root)
        }
    }

    /// In-order successor, or `NIL`.
    #[inline]
    pub(crate) fn next<S: NodeArena>(&self, s: &S, i: NodeIdx) -> NodeIdx {
        let r = s.node(i).right;
        if r != NIL {
            return self.min_from(s, r);
        }
        let mut c = i;
        let mut p = s.node(i).parent;
        while p != NIL && s.node(p).right == c {
            c = p;
            p = s.node(p).parent;
        }
        p
    }

    /// In-order predecessor, or `NIL`.
    #[inline]
    pub(crate) fn prev<S: NodeArena>(&self, s: &S, i: NodeIdx) -> NodeIdx {
        let l = s.node(i).left;
        if l != NIL {
            return self.max_from(s, l);
        }
        let mut c = i;
        let mut p = s.node(i).parent;
        while p != NIL && s.node(p).left == c {
            c = p;
            p = s.node(p).parent;
        }
        p
    }

    /// The node whose `start == key`, or `NIL`; counts visited nodes.
    #[inline]
    pub(crate) fn find_start<S: NodeArena>(&self, s: &S, key: u64, visited: &mut u32) -> NodeIdx {
        let mut cur = self.root;
        while cur != NIL {
            *visited += 1;
            let n = s.node(cur);
            if key < n.start {
                cur = n.left;
            } else if key > n.start {
                cur = n.right;
            } else {
                return cur;
            }
        }
        NIL
    }

    /// The node with the largest `start <= addr`, or `NIL`.
    #[inline]
    pub(crate) fn floor<S: NodeArena>(&self, s: &S, addr: u64, visited: &mut u32) -> NodeIdx {
        let mut cur = self.root;
        let mut best = NIL;
        while cur != NIL {
            *visited += 1;
            let n = s.node(cur);
            if n.start <= addr {
                best = cur;
                cur = n.right;
            } else {
                cur = n.left;
            }
        }
        best
    }

    /// The lowest node with `end > addr`, or `NIL` (Linux's search for the
    /// first busy area at or above `addr`).
    #[inline]
    pub(crate) fn first_end_above<S: NodeArena>(
        &self,
        s: &S,
        addr: u64,
        visited: &mut u32,
    ) -> NodeIdx {
        let mut cur = self.root;
        let mut best = NIL;
        while cur != NIL {
            *visited += 1;
            let n = s.node(cur);
            if n.end > addr {
                best = cur;
                if n.start <= addr {
                    break;
                }
                cur = n.left;
            } else {
                cur = n.right;
            }
        }
        best
    }

    /// Checks order, parent links, heights, balance and augmentation; returns
    /// the number of nodes.
    pub(crate) fn check<S: NodeArena>(&self, s: &S) -> Result<usize, &'static str> {
        fn walk<A: Augment, S: NodeArena>(
            s: &S,
            i: NodeIdx,
            parent: NodeIdx,
            lo: u64,
            count: &mut usize,
        ) -> Result<(u8, u64, u64), &'static str> {
            // Returns (height, aug, max end in subtree).
            if i == NIL {
                return Ok((0, 0, lo));
            }
            *count += 1;
            let n = *s.node(i);
            if n.parent != parent {
                return Err("broken parent link");
            }
            if n.start >= n.end {
                return Err("empty or inverted range in tree");
            }
            let (lh, la, lend) = walk::<A, S>(s, n.left, i, lo, count)?;
            if lend > n.start || n.start < lo {
                return Err("tree out of order or overlapping");
            }
            let (rh, ra, rend) = walk::<A, S>(s, n.right, i, n.end, count)?;
            if (lh as i32 - rh as i32).abs() > 1 {
                return Err("AVL balance violated");
            }
            let h = 1 + lh.max(rh);
            if n.height != h {
                return Err("stale height");
            }
            let a = (n.end - n.start).max(la).max(ra);
            if A::ACTIVE && n.aug != a {
                return Err("stale subtree max (augmented value)");
            }
            Ok((h, a, rend.max(n.end)))
        }
        let mut count = 0;
        walk::<A, S>(s, self.root, NIL, 0, &mut count)?;
        if count != self.len {
            return Err("tree length mismatch");
        }
        Ok(count)
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use crate::node::{NodeArena, Pool, test_pool};

    /// Nodes in the tests that check the whole tree after every change
    /// (quadratic): fewer under miri, still several levels deep.
    const CHECKED_NODES: u64 = if cfg!(miri) { 64 } else { 400 };

    fn add<A: Augment>(t: &mut Tree<A>, p: &mut Pool<512>, start: u64, end: u64) -> NodeIdx {
        let i = p.alloc_node().unwrap();
        p.node_mut(i).start = start;
        p.node_mut(i).end = end;
        t.insert(p, i);
        i
    }

    #[test]
    fn insert_remove_keeps_avl_order() {
        // A multiple of 3 (a third is left) and coprime to both strides.
        const N: u64 = CHECKED_NODES / 3 * 3;
        let mut p = test_pool::<512>();
        let mut t: Tree<MaxFree> = Tree::new();
        let mut idx = [0; N as usize];
        // A scrambled but deterministic order.
        for k in 0..N {
            let key = (k * 7919) % N;
            idx[key as usize] = add(&mut t, &mut p, key * 10, key * 10 + 1 + key % 5);
            t.check(&p).unwrap();
        }
        let mut v = 0;
        let mut i = t.first(&p);
        let mut n = 0;
        while i != NIL {
            assert!(p.node(i).start >= v);
            v = p.node(i).start;
            i = t.next(&p, i);
            n += 1;
        }
        assert_eq!(n, N);
        assert_eq!(p.node(t.root).aug, 5);
        for k in 0..N {
            let key = (k * 104729) % N;
            if key % 3 == 0 {
                continue;
            }
            t.remove(&mut p, idx[key as usize]);
            p.free_node(idx[key as usize]);
            t.check(&p).unwrap();
        }
        assert_eq!(t.len, N as usize / 3);
        let mut vis = 0;
        assert_ne!(t.find_start(&p, 30, &mut vis), NIL);
        assert_eq!(t.find_start(&p, 40, &mut vis), NIL);
        let f = t.floor(&p, 45, &mut vis);
        assert_eq!(p.node(f).start, 30);
        let g = t.first_end_above(&p, 31, &mut vis);
        assert_eq!(p.node(g).start, 30);
        assert_eq!(p.node(t.prev(&p, g)).start, 0);
    }

    /// `insert_after` with the true predecessor builds exactly the tree
    /// `insert` builds (same shape, same root), whatever the order.
    #[test]
    fn insert_after_matches_insert() {
        let mut pa = test_pool::<512>();
        let mut pb = test_pool::<512>();
        let mut a: Tree<MaxFree> = Tree::new();
        let mut b: Tree<MaxFree> = Tree::new();
        const N: u64 = CHECKED_NODES;
        for k in 0..N {
            let key = (k * 7919) % N;
            add(&mut a, &mut pa, key * 10, key * 10 + 1 + key % 7);
            let mut vis = 0;
            let pred = b.floor(&pb, key * 10, &mut vis);
            let i = pb.alloc_node().unwrap();
            pb.node_mut(i).start = key * 10;
            pb.node_mut(i).end = key * 10 + 1 + key % 7;
            b.insert_after(&mut pb, pred, i);
            b.check(&pb).unwrap();
            assert_eq!(a.root, b.root);
            for n in 0..=k as NodeIdx {
                let (x, y) = (pa.node(n), pb.node(n));
                assert_eq!(
                    (x.left, x.right, x.parent, x.height, x.aug),
                    (y.left, y.right, y.parent, y.height, y.aug)
                );
            }
        }
    }

    #[test]
    fn busy_tree_early_stop_stays_consistent() {
        let mut p = test_pool::<512>();
        let mut t: Tree<NoAug> = Tree::new();
        let mut v = [0; CHECKED_NODES as usize];
        for k in 0..CHECKED_NODES {
            v[k as usize] = add(&mut t, &mut p, k, k + 1);
        }
        t.check(&p).unwrap();
        for k in (0..CHECKED_NODES as usize).step_by(3) {
            t.remove(&mut p, v[k]);
            t.check(&p).unwrap();
        }
    }
}
