//! Where tree nodes come from: the [`NodeSource`] seam. The allocator never
//! allocates memory itself; the caller hands it a source of memory for its
//! node table ([`FixedPool`] with no heap at all, [`VecSource`] behind the
//! `alloc` feature). Inside the table nodes are addressed by index: indices
//! instead of pointers keep the trees in safe code and let one table serve
//! both the busy and the free tree.

use arch_api::FrameError;
use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};

/// Index of a node in a space's node table.
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

/// Where a [`VmapSpace`](crate::VmapSpace)'s tree nodes come from, asked
/// for the way every memory source in the workspace is (arch-api's
/// `FrameSource`): `&self` with the implementor's own locking, sizes as
/// `u64`, errors as [`FrameError`].
///
/// A space keeps its nodes in one table it owns (indexed by [`NodeIdx`],
/// links are indices, so the trees stay safe code) and asks the source only
/// for the table's memory: once when the space is created and again each
/// time the table is full (it then copies the nodes into the new block and
/// frees the old one). The table's own free list recycles nodes, so the
/// alloc and free paths never call the source.
///
/// # What it must serve
///
/// [`alloc_nodes`](Self::alloc_nodes)`(min, preferred)`: a block of `n`
/// nodes, `n >= min`, aligned to [`TreeNode`] (64 bytes), i.e. `n * 64`
/// bytes; `preferred` when it can (a fixed pool hands out all it has). A
/// space asks for `min = 1`, or `min = len + 1` when its table of `len`
/// nodes is full, preferring twice that (at least 64; a table holds at most
/// `u32::MAX - 1` nodes); while it copies, the old block is still in use. A
/// source that cannot serve `min` returns [`FrameError::OutOfFrames`]
/// (the space reports
/// [`VmapError::NodePoolExhausted`](crate::VmapError::NodePoolExhausted)).
///
/// # When it is called
///
/// From [`VmapSpace::new`](crate::VmapSpace::new), from an allocation that
/// finds the table full (with the space borrowed mutably, so under whatever
/// lock the caller keeps the space behind: vmalloc's vmap-area lock or a
/// sharded node's lock), and from the space's drop (the block is returned).
/// Several spaces may share one source (a reference to it): then it is
/// called concurrently and locks for itself.
///
/// # Safety
/// A block handed out is valid for reads and writes of `n * 64` bytes,
/// aligned to 64, used by nobody else, and stays where it is until it is
/// passed to [`free_nodes`](Self::free_nodes), even if the source value is
/// moved (memory inside the source value itself can only be handed out
/// through a reference that pins it, as [`FixedPool`] does).
pub unsafe trait NodeSource: Sync {
    /// A block of `n >= min` nodes, `preferred` if possible
    /// (`1 <= min <= preferred`). The contents are unspecified: the space
    /// initialises every node.
    fn alloc_nodes(&self, min: u64, preferred: u64)
    -> Result<(NonNull<TreeNode>, u64), FrameError>;

    /// Returns a block.
    ///
    /// # Safety
    /// `block` and `n` are one earlier [`alloc_nodes`](Self::alloc_nodes)
    /// result not yet freed, and the block is no longer used.
    unsafe fn free_nodes(&self, block: NonNull<TreeNode>, n: u64);
}

// SAFETY: forwards to `T`, which upholds the contract; a reference does not
// move the source.
unsafe impl<T: NodeSource + ?Sized> NodeSource for &T {
    fn alloc_nodes(
        &self,
        min: u64,
        preferred: u64,
    ) -> Result<(NonNull<TreeNode>, u64), FrameError> {
        (**self).alloc_nodes(min, preferred)
    }
    unsafe fn free_nodes(&self, block: NonNull<TreeNode>, n: u64) {
        // SAFETY: the caller's contract is `T`'s.
        unsafe { (**self).free_nodes(block, n) }
    }
}

/// Node access for the trees (public in a private module: nameable by the
/// sealed policy protocol, not outside the crate). [`NodeTable`] is the one
/// implementation.
pub trait NodeArena {
    /// A node slot, or `None` when the table is full and the source cannot
    /// grow it. Its contents are unspecified (a recycled slot keeps old
    /// values): the allocator sets every field it reads.
    fn alloc_node(&mut self) -> Option<NodeIdx>;
    /// Returns a slot obtained from [`alloc_node`](Self::alloc_node).
    fn free_node(&mut self, idx: NodeIdx);
    /// The node at `idx` (a slot currently handed out).
    fn node(&self, idx: NodeIdx) -> &TreeNode;
    /// The node at `idx`, mutably.
    fn node_mut(&mut self, idx: NodeIdx) -> &mut TreeNode;
    /// Slots currently handed out.
    fn in_use(&self) -> usize;

    /// `k` consecutive slots (a policy's wide node of `k` cache lines), or
    /// `None` when the source cannot grow the table. The slots are raw
    /// memory for the policy's own node type: it writes a whole value
    /// through [`run_mut`](Self::run_mut) before reading, never uses
    /// [`node`](Self::node) on them, and gives them back with
    /// [`free_run`](Self::free_run) (same `k`). A table serves one run size.
    fn alloc_run(&mut self, k: u32) -> Option<NodeIdx>;
    /// Returns a run from [`alloc_run`](Self::alloc_run).
    fn free_run(&mut self, idx: NodeIdx, k: u32);
    /// The first byte of run `idx` of `k` slots: valid for reads of
    /// `64 * k` bytes, aligned to 64, until the table is next changed.
    fn run(&self, idx: NodeIdx, k: u32) -> *const TreeNode;
    /// As [`run`](Self::run), valid for writes too.
    fn run_mut(&mut self, idx: NodeIdx, k: u32) -> *mut TreeNode;
}

/// A space's node table: one block from its [`NodeSource`], grown by
/// doubling, with an intrusive free list.
pub struct NodeTable<S: NodeSource> {
    src: S,
    /// `len` initialised nodes (dangling when `len == 0`).
    base: NonNull<TreeNode>,
    len: u32,
    /// Head of the list of returned slots (linked through `right`).
    free_head: NodeIdx,
    /// Slots `[next_unused, len)` have never been handed out.
    next_unused: u32,
    in_use: usize,
    /// Head of the list of returned runs (linked through `right` of their
    /// first slot, which holds a `TreeNode` again once returned).
    run_head: NodeIdx,
}

// SAFETY: the table owns its block exclusively (the source's contract); it
// is reached only through the table, so it moves between threads with it.
unsafe impl<S: NodeSource + Send> Send for NodeTable<S> {}
// SAFETY: `&NodeTable` only reads nodes; writes need `&mut`.
unsafe impl<S: NodeSource> Sync for NodeTable<S> {}

impl<S: NodeSource> NodeTable<S> {
    /// An empty table over `src` (asks nothing yet).
    pub(crate) const fn new(src: S) -> Self {
        Self {
            src,
            base: NonNull::dangling(),
            len: 0,
            free_head: NIL,
            next_unused: 0,
            in_use: 0,
            run_head: NIL,
        }
    }

    /// Replaces the block by a larger one from the source (at least `min`
    /// nodes); `false` if the source has none.
    #[cold]
    fn grow(&mut self, min: u64) -> bool {
        const MAX: u64 = NIL as u64 - 1;
        let len = u64::from(self.len);
        if len >= MAX || min > MAX {
            return false;
        }
        let preferred = (len * 2).clamp(64, MAX).max(min);
        let Ok((block, n)) = self.src.alloc_nodes(min, preferred) else {
            return false;
        };
        // More than a table can index is refused (a source that broke its
        // contract or a pool larger than that).
        if n < min || n > MAX {
            // A source that broke its contract: hand the block back.
            // SAFETY: just allocated, unused.
            unsafe { self.src.free_nodes(block, n) };
            return false;
        }
        // SAFETY: the new block holds `n > len` nodes and is ours; the old
        // one holds `len` initialised nodes; they are distinct blocks.
        unsafe {
            core::ptr::copy_nonoverlapping(self.base.as_ptr(), block.as_ptr(), len as usize);
            for i in len as usize..n as usize {
                block.as_ptr().add(i).write(TreeNode::EMPTY);
            }
        }
        if len != 0 {
            // SAFETY: the old block came from this source with `len` nodes
            // and nothing refers to it any more (we hold `&mut self`).
            unsafe { self.src.free_nodes(self.base, len) };
        }
        self.base = block;
        self.len = n as u32;
        true
    }
}

impl<S: NodeSource> NodeArena for NodeTable<S> {
    #[inline]
    fn alloc_node(&mut self) -> Option<NodeIdx> {
        let idx = if self.free_head != NIL {
            let idx = self.free_head;
            self.free_head = self.node(idx).right;
            idx
        } else {
            if self.next_unused == self.len && !self.grow(u64::from(self.len) + 1) {
                return None;
            }
            self.next_unused += 1;
            self.next_unused - 1
        };
        self.in_use += 1;
        Some(idx)
    }

    #[inline]
    fn free_node(&mut self, idx: NodeIdx) {
        // Only the free-list link is written: the allocator sets every field
        // of a slot it takes before reading it.
        let head = self.free_head;
        self.node_mut(idx).right = head;
        self.free_head = idx;
        self.in_use -= 1;
    }

    #[inline]
    fn node(&self, idx: NodeIdx) -> &TreeNode {
        assert!(idx < self.len, "node index out of range");
        // SAFETY: `idx < len`: an initialised node of our block, shared
        // borrow tied to `&self`.
        unsafe { &*self.base.as_ptr().add(idx as usize) }
    }

    #[inline]
    fn node_mut(&mut self, idx: NodeIdx) -> &mut TreeNode {
        assert!(idx < self.len, "node index out of range");
        // SAFETY: as `node`, exclusive through `&mut self`.
        unsafe { &mut *self.base.as_ptr().add(idx as usize) }
    }

    fn in_use(&self) -> usize {
        self.in_use
    }

    fn alloc_run(&mut self, k: u32) -> Option<NodeIdx> {
        let idx = if self.run_head != NIL {
            let idx = self.run_head;
            self.run_head = self.node(idx).right;
            idx
        } else {
            let need = self.next_unused.checked_add(k)?;
            if need > self.len && !self.grow(u64::from(need)) {
                return None;
            }
            self.next_unused = need;
            need - k
        };
        self.in_use += k as usize;
        Some(idx)
    }

    fn free_run(&mut self, idx: NodeIdx, k: u32) {
        let head = self.run_head;
        let p = self.run_mut(idx, k);
        // SAFETY: `run_mut` checked the run lies in the block; the first
        // slot becomes a `TreeNode` again (whatever the policy stored there)
        // before `node` reads its link.
        unsafe {
            p.write(TreeNode {
                right: head,
                ..TreeNode::EMPTY
            })
        };
        self.run_head = idx;
        self.in_use -= k as usize;
    }

    #[inline]
    fn run(&self, idx: NodeIdx, k: u32) -> *const TreeNode {
        assert!(
            u64::from(idx) + u64::from(k) <= u64::from(self.len),
            "run out of range"
        );
        // SAFETY: in bounds of our block (checked above).
        unsafe { self.base.as_ptr().add(idx as usize) }
    }

    #[inline]
    fn run_mut(&mut self, idx: NodeIdx, k: u32) -> *mut TreeNode {
        assert!(
            u64::from(idx) + u64::from(k) <= u64::from(self.len),
            "run out of range"
        );
        // SAFETY: in bounds of our block (checked above).
        unsafe { self.base.as_ptr().add(idx as usize) }
    }
}

impl<S: NodeSource> Drop for NodeTable<S> {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: our block from this source, `len` nodes, no longer used.
            unsafe { self.src.free_nodes(self.base, u64::from(self.len)) };
        }
    }
}

/// A fixed-capacity pool of `N` nodes: no heap, usable in early boot (a
/// `static`, or a local that outlives the space). One space draws from it
/// at a time, through a reference (`&pool`: the pool must not move while its
/// nodes are in use, which the borrow guarantees); the whole pool is handed
/// out at once and comes back when that space is dropped. Large pools
/// should be placed in a `static` or boxed, not built on a small stack.
pub struct FixedPool<const N: usize> {
    nodes: UnsafeCell<[TreeNode; N]>,
    /// Whether a space holds the pool (its own lock).
    taken: AtomicBool,
}

// SAFETY: the nodes are reached only by the one space that won `taken`.
unsafe impl<const N: usize> Sync for FixedPool<N> {}

impl<const N: usize> FixedPool<N> {
    /// An empty pool. `N` must fit in a `u32` below `u32::MAX`.
    pub const fn new() -> Self {
        assert!(
            (N as u64) < u32::MAX as u64,
            "FixedPool capacity must fit in u32"
        );
        Self {
            nodes: UnsafeCell::new([TreeNode::EMPTY; N]),
            taken: AtomicBool::new(false),
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

// SAFETY: the array lives in the pool, which the reference keeps in place
// for as long as the block can be in use; `taken` hands it to one space at a
// time, and it is only taken back through `free_nodes`.
unsafe impl<const N: usize> NodeSource for &FixedPool<N> {
    fn alloc_nodes(
        &self,
        min: u64,
        _preferred: u64,
    ) -> Result<(NonNull<TreeNode>, u64), FrameError> {
        if (N as u64) < min {
            return Err(FrameError::OutOfFrames);
        }
        if self.taken.swap(true, Ordering::Acquire) {
            return Err(FrameError::OutOfFrames);
        }
        let base =
            NonNull::new(self.nodes.get().cast::<TreeNode>()).ok_or(FrameError::OutOfFrames)?;
        Ok((base, N as u64))
    }

    unsafe fn free_nodes(&self, _block: NonNull<TreeNode>, _n: u64) {
        self.taken.store(false, Ordering::Release);
    }
}

/// Tree nodes from the heap (`alloc` feature), with an optional limit on
/// the table's size. An out-of-memory heap is reported as
/// [`FrameError::OutOfFrames`] (pool exhaustion), not an abort.
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub struct VecSource {
    limit: u64,
}

#[cfg(feature = "alloc")]
impl VecSource {
    /// A source without a limit.
    pub const fn new() -> Self {
        Self::with_limit(u32::MAX as usize - 1)
    }

    /// A source whose spaces hold at most `limit` nodes at once.
    pub const fn with_limit(limit: usize) -> Self {
        Self {
            limit: limit as u64,
        }
    }

    fn layout(n: u64) -> Option<alloc::alloc::Layout> {
        alloc::alloc::Layout::array::<TreeNode>(usize::try_from(n).ok()?).ok()
    }
}

#[cfg(feature = "alloc")]
impl Default for VecSource {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: each block is a fresh heap allocation of `n` nodes (aligned to
// `TreeNode`), freed with the same layout; the heap is thread-safe.
#[cfg(feature = "alloc")]
unsafe impl NodeSource for VecSource {
    fn alloc_nodes(
        &self,
        min: u64,
        preferred: u64,
    ) -> Result<(NonNull<TreeNode>, u64), FrameError> {
        let n = preferred.max(min).min(self.limit);
        if n < min || n == 0 {
            return Err(FrameError::OutOfFrames);
        }
        let layout = Self::layout(n).ok_or(FrameError::BadLayout)?;
        // SAFETY: `n >= 1` and `TreeNode` is not zero-sized.
        let p = unsafe { alloc::alloc::alloc(layout) }.cast::<TreeNode>();
        Ok((NonNull::new(p).ok_or(FrameError::OutOfFrames)?, n))
    }

    unsafe fn free_nodes(&self, block: NonNull<TreeNode>, n: u64) {
        let layout = Self::layout(n).expect("a block this source handed out");
        // SAFETY: the caller passes back one block of `n` nodes from
        // `alloc_nodes`, allocated with this layout.
        unsafe { alloc::alloc::dealloc(block.as_ptr().cast(), layout) };
    }
}

/// A boxed [`FixedPool`] for the crate's unit tests: the box keeps the pool
/// in place while the value moves.
#[cfg(all(test, not(kmm_loom)))]
pub(crate) struct TestPool<const N: usize>(std::boxed::Box<FixedPool<N>>);

/// A node table over a fresh boxed pool of `N` nodes.
#[cfg(all(test, not(kmm_loom)))]
pub(crate) fn test_pool<const N: usize>() -> NodeTable<TestPool<N>> {
    NodeTable::new(TestPool(std::boxed::Box::default()))
}

/// The table type [`test_pool`] returns.
#[cfg(all(test, not(kmm_loom)))]
pub(crate) type Pool<const N: usize> = NodeTable<TestPool<N>>;

// SAFETY: forwards to the boxed pool, which does not move with the box.
#[cfg(all(test, not(kmm_loom)))]
unsafe impl<const N: usize> NodeSource for TestPool<N> {
    fn alloc_nodes(
        &self,
        min: u64,
        preferred: u64,
    ) -> Result<(NonNull<TreeNode>, u64), FrameError> {
        (&*self.0).alloc_nodes(min, preferred)
    }
    unsafe fn free_nodes(&self, block: NonNull<TreeNode>, n: u64) {
        // SAFETY: the caller's contract.
        unsafe { (&*self.0).free_nodes(block, n) }
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;

    #[test]
    fn fixed_pool_exhausts_and_recycles() {
        let pool = FixedPool::<2>::new();
        let mut p = NodeTable::new(&pool);
        let a = p.alloc_node().unwrap();
        let b = p.alloc_node().unwrap();
        assert_ne!(a, b);
        assert_eq!(p.alloc_node(), None);
        p.free_node(a);
        assert_eq!(p.in_use(), 1);
        assert_eq!(p.alloc_node(), Some(a));
        // One space at a time: a second table gets nothing until the first
        // gives the pool back.
        let mut q = NodeTable::new(&pool);
        assert_eq!(q.alloc_node(), None);
        drop(p);
        assert!(q.alloc_node().is_some());
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn vec_source_limit() {
        let mut s = NodeTable::new(VecSource::with_limit(1));
        let a = s.alloc_node().unwrap();
        assert_eq!(s.alloc_node(), None);
        s.free_node(a);
        assert_eq!(s.alloc_node(), Some(a));
    }

    /// Runs are consecutive slots past the single ones, grow the table
    /// when needed, and come back through their own list.
    #[cfg(feature = "alloc")]
    #[test]
    fn runs_are_consecutive_and_recycled() {
        let mut s = NodeTable::new(VecSource::new());
        let one = s.alloc_node().unwrap();
        let r = s.alloc_run(4).unwrap();
        assert_eq!(r, one + 1);
        let big: std::vec::Vec<_> = (0..40).map(|_| s.alloc_run(4).unwrap()).collect();
        assert!(
            big.windows(2).all(|w| w[1] == w[0] + 4),
            "grown in place order"
        );
        assert_eq!(s.in_use(), 1 + 4 * 41);
        // SAFETY: a run of 4 slots just taken, in bounds; a whole u64 write.
        unsafe { s.run_mut(r, 4).cast::<u64>().write(7) };
        s.free_run(r, 4);
        assert_eq!(s.alloc_run(4), Some(r));
        // The single-slot list is untouched by runs.
        s.free_node(one);
        assert_eq!(s.alloc_node(), Some(one));
    }

    /// Growing copies the nodes: indices keep their contents.
    #[cfg(feature = "alloc")]
    #[test]
    fn vec_source_grows_keeping_nodes() {
        let mut s = NodeTable::new(VecSource::new());
        for i in 0..1000u64 {
            let n = s.alloc_node().unwrap();
            assert_eq!(u64::from(n), i);
            s.node_mut(n).start = i * 7;
        }
        for i in 0..1000u32 {
            assert_eq!(s.node(i).start, u64::from(i) * 7);
        }
        assert_eq!(s.in_use(), 1000);
    }
}
