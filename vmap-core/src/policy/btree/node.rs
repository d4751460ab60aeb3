//! The B-tree's node: its layout (four cache lines, twelve slots), the slot operations, and
//! typed access to a node's run of table slots.

use crate::node::{NIL, NodeArena, NodeIdx, TreeNode};
/// Slots per node.
pub(super) const F: usize = 12;
/// Deepest tree the path holds (see the module docs: well above reach).
pub(super) const MAXD: usize = 24;

/// One node: four cache lines (`K` table slots).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct BNode {
    pub(super) len: u32,
    /// 1 for a leaf.
    pub(super) leaf: u32,
    /// Leaf: block starts. Inner: lowest block start below the slot.
    pub(super) lo: [u64; F],
    /// Leaf: block ends. Inner: largest block size below the slot.
    pub(super) hi: [u64; F],
    /// Inner: the child. Leaf: the busy area just below the block (ending
    /// at its start; `NIL` at the start of the space), so an allocation
    /// names its busy predecessor without a search of the busy tree.
    pub(super) kid: [NodeIdx; F],
    pub(super) _pad: [u32; 2],
}

/// Table slots per node.
pub(super) const K: u32 = (core::mem::size_of::<BNode>() / core::mem::size_of::<TreeNode>()) as u32;
const _: () = assert!(core::mem::size_of::<BNode>() == K as usize * 64);
const _: () = assert!(core::mem::align_of::<BNode>() == core::mem::align_of::<TreeNode>());

impl BNode {
    pub(super) const EMPTY: Self = Self {
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
    pub(super) fn max(&self) -> u64 {
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
    pub(super) fn rank(&self, key: u64) -> usize {
        let n = self.len as usize;
        let mut r = 0;
        while r < n && self.lo[r] <= key {
            r += 1;
        }
        r
    }

    /// Opens slot `pos` (shifting the rest up) and writes it.
    #[inline]
    pub(super) fn insert(&mut self, pos: usize, lo: u64, hi: u64, kid: NodeIdx) {
        let n = self.len as usize;
        self.lo.copy_within(pos..n, pos + 1);
        self.hi.copy_within(pos..n, pos + 1);
        self.kid.copy_within(pos..n, pos + 1);
        (self.lo[pos], self.hi[pos], self.kid[pos]) = (lo, hi, kid);
        self.len += 1;
    }

    /// Closes slot `pos` (the freed last slot is zeroed).
    #[inline]
    pub(super) fn remove(&mut self, pos: usize) {
        let n = self.len as usize;
        self.lo.copy_within(pos + 1..n, pos);
        self.hi.copy_within(pos + 1..n, pos);
        self.kid.copy_within(pos + 1..n, pos);
        (self.lo[n - 1], self.hi[n - 1], self.kid[n - 1]) = (0, 0, NIL);
        self.len -= 1;
    }
}

#[inline]
pub(super) fn get<S: NodeArena>(s: &S, i: NodeIdx) -> &BNode {
    // SAFETY: `i` is a run of `K` slots this policy allocated and
    // initialised with a whole `BNode` (`new_node`), not yet freed; `run`
    // checked the bounds and gives 64-byte alignment, `BNode`'s. Only this
    // policy reaches these slots, and the borrow of `s` keeps the table from
    // changing while the reference lives.
    unsafe { &*s.run(i, K).cast::<BNode>() }
}

#[inline]
pub(super) fn get_mut<S: NodeArena>(s: &mut S, i: NodeIdx) -> &mut BNode {
    // SAFETY: as `get`, exclusive through `&mut S`.
    unsafe { &mut *s.run_mut(i, K).cast::<BNode>() }
}
