//! Where tree nodes come from: the [`NodeSource`] seam. The allocator never
//! allocates memory itself; the caller hands it a source of fixed-size tree
//! nodes addressed by index ([`FixedPool`] with no heap at all, [`VecSource`]
//! behind the `alloc` feature). Indices instead of pointers keep the trees in
//! safe code and let one source serve both the busy and the free tree.

/// Index of a node inside a [`NodeSource`].
pub type NodeIdx = u32;

/// "No node": the null link.
pub(crate) const NIL: NodeIdx = u32::MAX;

/// A tree node: one busy area or one free block `[start, end)` plus its AVL
/// links. Opaque outside the crate; sources only store it.
///
/// One cache line each (47 bytes of fields): a node never straddles two
/// lines, and the index-to-address step is a single shift.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
pub struct TreeNode {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Largest `end - start` in this subtree (free tree only).
    pub(crate) aug: u64,
    pub(crate) left: NodeIdx,
    pub(crate) right: NodeIdx,
    pub(crate) parent: NodeIdx,
    pub(crate) height: u8,
    /// Busy area parked in a per-node pool of the sharded front (still busy,
    /// but invisible to `find` and `free`).
    pub(crate) parked: bool,
    /// A free block (in the free tree), not a busy area.
    pub(crate) free: bool,
    /// The tiles just below and above in address order, busy or free
    /// (`Augmented` only; `NIL` at the ends of the space): vfree finds the
    /// free blocks it merges with without searching the free tree.
    pub(crate) prev_tile: NodeIdx,
    pub(crate) next_tile: NodeIdx,
}

impl TreeNode {
    /// An unused node.
    pub const EMPTY: Self = Self {
        start: 0,
        end: 0,
        aug: 0,
        left: NIL,
        right: NIL,
        parent: NIL,
        height: 0,
        parked: false,
        free: false,
        prev_tile: NIL,
        next_tile: NIL,
    };
}

/// Supplies tree nodes. Running out is reported by [`NodeSource::alloc_node`]
/// returning `None`, which the allocator turns into
/// [`VmapError::NodePoolExhausted`](crate::VmapError::NodePoolExhausted).
pub trait NodeSource {
    /// A node slot, or `None` when the source is exhausted. Its contents
    /// are unspecified (a recycled slot may keep old values): the allocator
    /// sets every field it reads.
    fn alloc_node(&mut self) -> Option<NodeIdx>;
    /// Returns a slot obtained from [`alloc_node`](Self::alloc_node).
    fn free_node(&mut self, idx: NodeIdx);
    /// The node at `idx` (a slot currently handed out).
    fn node(&self, idx: NodeIdx) -> &TreeNode;
    /// The node at `idx`, mutably.
    fn node_mut(&mut self, idx: NodeIdx) -> &mut TreeNode;
    /// Slots currently handed out.
    fn in_use(&self) -> usize;
}

/// A borrowed source: lets a space draw from a pool that lives elsewhere
/// (a `static`, a boxed pool).
impl<T: NodeSource + ?Sized> NodeSource for &mut T {
    #[inline]
    fn alloc_node(&mut self) -> Option<NodeIdx> {
        (**self).alloc_node()
    }
    #[inline]
    fn free_node(&mut self, idx: NodeIdx) {
        (**self).free_node(idx)
    }
    #[inline]
    fn node(&self, idx: NodeIdx) -> &TreeNode {
        (**self).node(idx)
    }
    #[inline]
    fn node_mut(&mut self, idx: NodeIdx) -> &mut TreeNode {
        (**self).node_mut(idx)
    }
    fn in_use(&self) -> usize {
        (**self).in_use()
    }
}

/// A fixed-capacity pool of `N` nodes with an intrusive free list: no heap,
/// usable in early boot. Large pools should be placed in a `static` or boxed,
/// not built on a small stack.
pub struct FixedPool<const N: usize> {
    nodes: [TreeNode; N],
    /// Head of the list of returned slots (linked through `right`).
    free_head: NodeIdx,
    /// Slots `[next_unused, N)` have never been handed out.
    next_unused: u32,
    in_use: usize,
}

impl<const N: usize> FixedPool<N> {
    /// An empty pool. `N` must fit in a `u32` below `u32::MAX`.
    pub const fn new() -> Self {
        assert!(
            (N as u64) < u32::MAX as u64,
            "FixedPool capacity must fit in u32"
        );
        Self {
            nodes: [TreeNode::EMPTY; N],
            free_head: NIL,
            next_unused: 0,
            in_use: 0,
        }
    }

    /// Total slots.
    pub const fn capacity(&self) -> usize {
        N
    }
}

impl<const N: usize> Default for FixedPool<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> NodeSource for FixedPool<N> {
    #[inline]
    fn alloc_node(&mut self) -> Option<NodeIdx> {
        let idx = if self.free_head != NIL {
            let idx = self.free_head;
            self.free_head = self.nodes[idx as usize].right;
            idx
        } else if (self.next_unused as usize) < N {
            self.next_unused += 1;
            self.next_unused - 1
        } else {
            return None;
        };
        self.in_use += 1;
        Some(idx)
    }

    #[inline]
    fn free_node(&mut self, idx: NodeIdx) {
        // Only the free-list link is written: the allocator sets every field
        // of a slot it takes before reading it.
        self.nodes[idx as usize].right = self.free_head;
        self.free_head = idx;
        self.in_use -= 1;
    }

    #[inline]
    fn node(&self, idx: NodeIdx) -> &TreeNode {
        &self.nodes[idx as usize]
    }

    #[inline]
    fn node_mut(&mut self, idx: NodeIdx) -> &mut TreeNode {
        &mut self.nodes[idx as usize]
    }

    fn in_use(&self) -> usize {
        self.in_use
    }
}

/// A growable node source on the heap (`alloc` feature), with an optional
/// limit. Growth uses `try_reserve`, so an out-of-memory heap is reported as
/// pool exhaustion rather than an abort.
#[cfg(feature = "alloc")]
pub struct VecSource {
    nodes: alloc::vec::Vec<TreeNode>,
    free_head: NodeIdx,
    in_use: usize,
    limit: usize,
}

#[cfg(feature = "alloc")]
impl VecSource {
    /// An empty source without a limit.
    pub const fn new() -> Self {
        Self::with_limit(u32::MAX as usize - 1)
    }

    /// An empty source that hands out at most `limit` nodes at once.
    pub const fn with_limit(limit: usize) -> Self {
        Self {
            nodes: alloc::vec::Vec::new(),
            free_head: NIL,
            in_use: 0,
            limit,
        }
    }
}

#[cfg(feature = "alloc")]
impl Default for VecSource {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "alloc")]
impl NodeSource for VecSource {
    #[inline]
    fn alloc_node(&mut self) -> Option<NodeIdx> {
        if self.in_use >= self.limit {
            return None;
        }
        let idx = if self.free_head != NIL {
            let idx = self.free_head;
            self.free_head = self.nodes[idx as usize].right;
            idx
        } else {
            self.nodes.try_reserve(1).ok()?;
            self.nodes.push(TreeNode::EMPTY);
            (self.nodes.len() - 1) as NodeIdx
        };
        self.in_use += 1;
        Some(idx)
    }

    #[inline]
    fn free_node(&mut self, idx: NodeIdx) {
        // Only the free-list link is written: the allocator sets every field
        // of a slot it takes before reading it.
        self.nodes[idx as usize].right = self.free_head;
        self.free_head = idx;
        self.in_use -= 1;
    }

    #[inline]
    fn node(&self, idx: NodeIdx) -> &TreeNode {
        &self.nodes[idx as usize]
    }

    #[inline]
    fn node_mut(&mut self, idx: NodeIdx) -> &mut TreeNode {
        &mut self.nodes[idx as usize]
    }

    fn in_use(&self) -> usize {
        self.in_use
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;

    #[test]
    fn fixed_pool_exhausts_and_recycles() {
        let mut p = FixedPool::<2>::new();
        let a = p.alloc_node().unwrap();
        let b = p.alloc_node().unwrap();
        assert_ne!(a, b);
        assert_eq!(p.alloc_node(), None);
        p.free_node(a);
        assert_eq!(p.in_use(), 1);
        assert_eq!(p.alloc_node(), Some(a));
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn vec_source_limit() {
        let mut s = VecSource::with_limit(1);
        let a = s.alloc_node().unwrap();
        assert_eq!(s.alloc_node(), None);
        s.free_node(a);
        assert_eq!(s.alloc_node(), Some(a));
    }
}
