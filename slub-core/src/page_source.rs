//! Where slab pages come from: the OS's frame allocator and its direct map.
//!
//! Slab pages are asked for the way every memory source in the workspace
//! is: arch-api's [`FrameSource`] (physical addresses, `u64` sizes,
//! `Result<_, FrameError>`, `&self` with the implementor's own locking),
//! reached through the platform's [`PhysMap`] (`__va` when a block is
//! allocated, `__pa` when it is freed). [`PageSource`] only names "a type
//! that is both" and carries the promise that the memory is really there;
//! [`FramePages`] pairs a separate frame source and direct map. Hosted code
//! uses [`SystemPages`] (host heap through `std::alloc::System`, safe inside
//! a `#[global_allocator]`) or [`ArenaPages`] (arch-api's simulated physical
//! memory).
//!
//! Slabs are naturally aligned blocks (a slab of `2^k` bytes starts at a
//! multiple of `2^k`), so the slab of any object is `ptr & !(slab_bytes - 1)`,
//! which is what makes the end token work without a `struct page` array.

use arch_api::{FrameError, FrameSource, PhysAddr, PhysMap};
use core::ptr::NonNull;

/// The memory a [`KmemCache`](crate::KmemCache), [`Kmalloc`](crate::Kmalloc)
/// or [`SlubGlobalAlloc`](crate::SlubGlobalAlloc) draws its pages from: the
/// OS's [`FrameSource`] together with its direct map [`PhysMap`], as one
/// type (the platform's, or [`FramePages`] over two).
///
/// # What it must serve
///
/// Every request is a whole number of granules
/// ([`FrameSource::granule`], taken as the page size) aligned to a power of
/// two, and is freed with the same size:
///
/// * slabs: a cache of object size `S` asks for `2^order` pages, order
///   0 to 6 (`calculate_order`: the smallest order up to 3 that holds the
///   slab header and enough objects wasting at most 1/8 of the slab, else
///   up to 6; [`KmemCache::slab_bytes`](crate::KmemCache::slab_bytes)
///   tells), **aligned to their size**: the natural alignment the slab
///   lookup `ptr & !(slab_bytes - 1)` relies on;
/// * per-CPU arrays (once per cache, at creation): the array's bytes rounded
///   up to pages, page-aligned;
/// * sheaves (sheaves front): one page, page-aligned;
/// * large `kmalloc` (above 16384 bytes): the size rounded up to pages,
///   aligned to `max(layout.align(), page)`.
///
/// # When it is called
///
/// Only from slow paths, never from the lockless alloc/free fast paths, and
/// concurrently from any number of CPUs (the source does its own locking):
///
/// * a new slab: from the allocation slow path, under the calling CPU's
///   [`CpuLocal`](crate::CpuLocal) guard, with no node list lock held (the
///   partial list is searched and its lock dropped first);
/// * an empty slab freed: after it is unlinked, with the node list lock
///   dropped, from a free's slow path (possibly a remote CPU's), from
///   deactivating a CPU slab (under that CPU's guard), or from `shrink` /
///   `destroy`;
/// * a sheaf pool page: allocated under the calling CPU's guard **and the
///   barn's lock** (the raw lock `R`), freed by `destroy` under the barn's
///   lock, so the source must not take a lock that is also held around a
///   call into this cache;
/// * per-CPU arrays: in `KmemCache::new` and `destroy`;
/// * large `kmalloc` / `kfree`: directly, with no lock held.
///
/// Inside a guard the source must not sleep or reschedule where the kernel
/// forbids it (a guard may be `preempt_disable`). A failed allocation comes
/// back to the caller as `AllocError::OutOfMemory`; a refused free is
/// ignored (it means the contract above was broken).
///
/// # Safety
/// The frames [`FrameSource::alloc`] hands out are RAM that nobody else uses
/// until they are freed, and [`PhysMap::phys_to_ptr`] of them gives a
/// pointer valid for reads and writes of the whole block, with
/// [`PhysMap::ptr_to_phys`] going back to the same frame. The source must not
/// allocate through the cache that uses it (a `#[global_allocator]` built on
/// this crate must not have a source that allocates through the global
/// allocator).
pub unsafe trait PageSource: FrameSource + PhysMap {}

// SAFETY: forwards to `T`, which upholds the contract (arch-api forwards
// `FrameSource` and `PhysMap` through references).
unsafe impl<T: PageSource + ?Sized> PageSource for &T {}

/// The block-level view the slab layer uses: pointers and `usize`, one
/// granule = one page. Crate-private so the public contract stays
/// `FrameSource` + `PhysMap`.
pub(crate) trait SlabPages: PageSource {
    /// The page size (the granule).
    #[inline]
    fn page_size(&self) -> usize {
        self.granule() as usize
    }

    /// `size` bytes aligned to `align`, reached through the direct map.
    #[inline]
    fn alloc_pages(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        let phys = self.alloc(size as u64, align as u64).ok()?;
        NonNull::new(self.phys_to_ptr(phys))
    }

    /// Returns a block.
    ///
    /// # Safety
    /// `ptr` and `size` are those of one earlier successful `alloc_pages`
    /// that was not yet freed, and nothing uses the memory any more.
    #[inline]
    unsafe fn free_pages(&self, ptr: NonNull<u8>, size: usize) {
        // A failure here means the caller broke the contract; there is
        // nothing useful to do with it in a free path.
        if let Some(phys) = self.ptr_to_phys(ptr.as_ptr()) {
            let _ = self.free(phys, size as u64);
        }
    }

    /// Whether the direct map says `addr` is none of its memory (so a
    /// pointer there is foreign and must not be read).
    #[inline]
    fn disowns(&self, addr: usize) -> bool {
        self.ptr_to_phys(addr as *const u8).is_none()
    }
}

impl<P: PageSource + ?Sized> SlabPages for P {}

/// An OS's frame allocator and its direct map as one page source.
///
/// Both are the caller's: a block is reached through `map` when allocated
/// and goes back to its frame through [`PhysMap::ptr_to_phys`] when freed,
/// so any direct map works (linear, identity, or not linear at all). A
/// platform type that implements both traits itself can implement
/// [`PageSource`] directly instead.
pub struct FramePages<F, M> {
    frames: F,
    map: M,
}

impl<F, M> core::fmt::Debug for FramePages<F, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FramePages").finish_non_exhaustive()
    }
}

impl<F: FrameSource, M: PhysMap> FramePages<F, M> {
    /// Slab pages from `frames`, reached through the direct map `map`.
    pub const fn new(frames: F, map: M) -> Self {
        Self { frames, map }
    }

    /// The wrapped source.
    pub fn frames(&self) -> &F {
        &self.frames
    }

    /// The direct map in use.
    pub fn phys_map(&self) -> &M {
        &self.map
    }
}

impl<F: FrameSource, M: PhysMap> FrameSource for FramePages<F, M> {
    #[inline]
    fn granule(&self) -> u64 {
        self.frames.granule()
    }
    #[inline]
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        self.frames.alloc(size, align)
    }
    fn alloc_many(&self, size: u64, align: u64, out: &mut [PhysAddr]) -> Result<(), FrameError> {
        self.frames.alloc_many(size, align, out)
    }
    #[inline]
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        self.frames.free(addr, size)
    }
    fn free_many(&self, ranges: &[(PhysAddr, u64)], failed: &mut dyn FnMut(PhysAddr, FrameError)) {
        self.frames.free_many(ranges, failed)
    }
}

impl<F: FrameSource, M: PhysMap> PhysMap for FramePages<F, M> {
    #[inline]
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        self.map.phys_to_ptr(addr)
    }
    #[inline]
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.map.ptr_to_phys(ptr)
    }
}

// SAFETY: frames come from the OS's `FrameSource`, which hands each range to
// one owner until freed; the caller's direct map gives the kernel's mapping
// of them and takes a pointer back to the frame it maps.
unsafe impl<F: FrameSource, M: PhysMap> PageSource for FramePages<F, M> {}

#[cfg(feature = "std")]
mod hosted {
    use super::*;
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::alloc::{GlobalAlloc, Layout, System};

    /// Host heap pages straight from `std::alloc::System` (not through the
    /// global allocator, so it can back a `#[global_allocator]`). The
    /// "physical" address of a block is its host address (an identity direct
    /// map). Counts the bytes and blocks it has out, for leak checks.
    ///
    /// A block of `size` bytes is aligned to `max(4096, size)` rounded up to
    /// a power of two (the alignment a free can recompute from the size);
    /// a larger alignment is refused with [`FrameError::BadLayout`]. Frees
    /// are checked against a record of the blocks out, so a range it did not
    /// hand out is refused with [`FrameError::NotAllocated`].
    #[derive(Debug, Default)]
    pub struct SystemPages {
        bytes: AtomicUsize,
        blocks: AtomicUsize,
        live: Registry,
    }

    impl SystemPages {
        /// A source with nothing allocated.
        pub const fn new() -> Self {
            Self {
                bytes: AtomicUsize::new(0),
                blocks: AtomicUsize::new(0),
                live: Registry::new(),
            }
        }

        /// Bytes currently handed out.
        pub fn bytes_in_use(&self) -> usize {
            self.bytes.load(Ordering::Relaxed)
        }

        /// Blocks currently handed out.
        pub fn blocks_in_use(&self) -> usize {
            self.blocks.load(Ordering::Relaxed)
        }

        fn layout(size: u64, align: u64) -> Result<Layout, FrameError> {
            if size == 0 || size % 4096 != 0 || !align.is_power_of_two() {
                return Err(FrameError::BadLayout);
            }
            let natural = size
                .checked_next_power_of_two()
                .ok_or(FrameError::BadLayout)?;
            if align > natural {
                return Err(FrameError::BadLayout);
            }
            Layout::from_size_align(size as usize, natural as usize)
                .map_err(|_| FrameError::BadLayout)
        }
    }

    impl FrameSource for SystemPages {
        fn granule(&self) -> u64 {
            4096
        }

        fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
            let layout = Self::layout(size, align)?;
            // SAFETY: `layout` has a non-zero size (checked in `layout`).
            let p = unsafe { System.alloc(layout) };
            if p.is_null() {
                return Err(FrameError::OutOfFrames);
            }
            if !self.live.insert(p as usize, size as usize) {
                // SAFETY: just allocated above with `layout`, not handed out.
                unsafe { System.dealloc(p, layout) };
                return Err(FrameError::OutOfFrames);
            }
            self.bytes.fetch_add(size as usize, Ordering::Relaxed);
            self.blocks.fetch_add(1, Ordering::Relaxed);
            Ok(PhysAddr::new(p as u64))
        }

        fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
            let layout = Self::layout(size, 4096).map_err(|_| FrameError::NotAllocated)?;
            if !self.live.remove(addr.as_u64() as usize, size as usize) {
                return Err(FrameError::NotAllocated);
            }
            // SAFETY: the registry held this block with this size, so it was
            // allocated by `alloc` above with the layout computed from the
            // same size, and it is removed, so it is freed once.
            unsafe { System.dealloc(addr.as_u64() as *mut u8, layout) };
            self.bytes.fetch_sub(size as usize, Ordering::Relaxed);
            self.blocks.fetch_sub(1, Ordering::Relaxed);
            Ok(())
        }
    }

    /// Identity: host memory is its own direct map.
    impl PhysMap for SystemPages {
        #[inline]
        fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
            addr.as_u64() as *mut u8
        }
        #[inline]
        fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
            Some(PhysAddr::new(ptr as u64))
        }
    }

    // SAFETY: `System` returns fresh, exclusively owned memory of the layout
    // asked for, identity-mapped; a block goes back only if the registry
    // held it, with the same layout.
    unsafe impl PageSource for SystemPages {}

    /// The blocks a [`SystemPages`] has out, `(address, size)`: an
    /// open-addressing table in memory from `System`, under a spin lock
    /// (page allocations are the slow path). Address 0 marks an empty slot,
    /// 1 a removed one.
    struct Registry {
        lock: AtomicBool,
        table: UnsafeCell<Table>,
    }

    struct Table {
        slots: *mut (usize, usize),
        cap: usize,
        /// Slots not empty (live or removed).
        used: usize,
        live: usize,
    }

    // SAFETY: `table` is only touched with `lock` held (see `with`); the
    // slots are plain integers in memory owned by the registry.
    unsafe impl Sync for Registry {}
    // SAFETY: as above; the table memory is owned, not thread-bound.
    unsafe impl Send for Registry {}

    impl core::fmt::Debug for Registry {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_struct("Registry").finish_non_exhaustive()
        }
    }

    impl Default for Registry {
        fn default() -> Self {
            Self::new()
        }
    }

    const EMPTY: usize = 0;
    const REMOVED: usize = 1;

    impl Registry {
        const fn new() -> Self {
            Self {
                lock: AtomicBool::new(false),
                table: UnsafeCell::new(Table {
                    slots: core::ptr::null_mut(),
                    cap: 0,
                    used: 0,
                    live: 0,
                }),
            }
        }

        fn with<T>(&self, f: impl FnOnce(&mut Table) -> T) -> T {
            while self
                .lock
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                core::hint::spin_loop();
            }
            // SAFETY: the lock is held, so this is the only reference.
            let r = f(unsafe { &mut *self.table.get() });
            self.lock.store(false, Ordering::Release);
            r
        }

        fn insert(&self, addr: usize, size: usize) -> bool {
            self.with(|t| t.insert(addr, size))
        }

        fn remove(&self, addr: usize, size: usize) -> bool {
            self.with(|t| t.remove(addr, size))
        }
    }

    impl Table {
        fn layout(cap: usize) -> Layout {
            Layout::array::<(usize, usize)>(cap).expect("registry size")
        }

        fn home(&self, addr: usize) -> usize {
            ((addr >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15)) & (self.cap - 1)
        }

        fn slot(&mut self, i: usize) -> &mut (usize, usize) {
            // SAFETY: `i < cap` (masked), the table holds `cap` initialised
            // slots, and `&mut self` is exclusive.
            unsafe { &mut *self.slots.add(i) }
        }

        /// Rebuilds into a table of `cap` slots (dropping removed ones).
        fn rebuild(&mut self, cap: usize) -> bool {
            // SAFETY: non-zero size (cap >= 64).
            let fresh = unsafe { System.alloc_zeroed(Self::layout(cap)) }.cast::<(usize, usize)>();
            if fresh.is_null() {
                return false;
            }
            let old = core::mem::replace(
                self,
                Table {
                    slots: fresh,
                    cap,
                    used: 0,
                    live: 0,
                },
            );
            for i in 0..old.cap {
                // SAFETY: `i < old.cap`; the old table is still allocated.
                let (a, s) = unsafe { *old.slots.add(i) };
                if a > REMOVED {
                    self.place(a, s);
                }
            }
            if old.cap != 0 {
                // SAFETY: allocated by an earlier `rebuild` with this layout.
                unsafe { System.dealloc(old.slots.cast(), Self::layout(old.cap)) };
            }
            true
        }

        fn place(&mut self, addr: usize, size: usize) {
            let mut i = self.home(addr);
            while self.slot(i).0 > REMOVED {
                i = (i + 1) & (self.cap - 1);
            }
            if self.slot(i).0 == EMPTY {
                self.used += 1;
            }
            *self.slot(i) = (addr, size);
            self.live += 1;
        }

        fn insert(&mut self, addr: usize, size: usize) -> bool {
            if (self.used + 1) * 2 > self.cap {
                let cap = ((self.live + 1) * 4).next_power_of_two().max(64);
                if !self.rebuild(cap) {
                    return false;
                }
            }
            self.place(addr, size);
            true
        }

        fn remove(&mut self, addr: usize, size: usize) -> bool {
            if self.cap == 0 || addr <= REMOVED {
                return false;
            }
            let mut i = self.home(addr);
            loop {
                let (a, s) = *self.slot(i);
                if a == EMPTY {
                    return false;
                }
                if a == addr {
                    if s != size {
                        return false;
                    }
                    self.slot(i).0 = REMOVED;
                    self.live -= 1;
                    return true;
                }
                i = (i + 1) & (self.cap - 1);
            }
        }
    }

    impl Drop for Registry {
        fn drop(&mut self) {
            let t = self.table.get_mut();
            if t.cap != 0 {
                // SAFETY: allocated by `rebuild` with this layout, freed once.
                unsafe { System.dealloc(t.slots.cast(), Table::layout(t.cap)) };
            }
        }
    }

    /// arch-api's simulated physical memory as a page source; its direct
    /// map knows which addresses it owns, so foreign pointers are refused
    /// without a read.
    pub struct ArenaPages<'a> {
        arena: &'a arch_api::PhysArena,
    }

    impl core::fmt::Debug for ArenaPages<'_> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_struct("ArenaPages")
                .field("frames_in_use", &self.arena.frames_in_use())
                .finish()
        }
    }

    impl<'a> ArenaPages<'a> {
        /// Pages from `arena`.
        pub fn new(arena: &'a arch_api::PhysArena) -> Self {
            Self { arena }
        }

        /// Frames of the arena currently allocated.
        pub fn frames_in_use(&self) -> u64 {
            self.arena.frames_in_use()
        }
    }

    impl FrameSource for ArenaPages<'_> {
        #[inline]
        fn granule(&self) -> u64 {
            self.arena.granule()
        }
        #[inline]
        fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
            self.arena.alloc(size, align)
        }
        fn alloc_many(
            &self,
            size: u64,
            align: u64,
            out: &mut [PhysAddr],
        ) -> Result<(), FrameError> {
            self.arena.alloc_many(size, align, out)
        }
        #[inline]
        fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
            self.arena.free(addr, size)
        }
        fn free_many(
            &self,
            ranges: &[(PhysAddr, u64)],
            failed: &mut dyn FnMut(PhysAddr, FrameError),
        ) {
            self.arena.free_many(ranges, failed)
        }
    }

    impl PhysMap for ArenaPages<'_> {
        #[inline]
        fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
            self.arena.phys_to_ptr(addr)
        }
        #[inline]
        fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
            self.arena.ptr_to_phys(ptr)
        }
    }

    // SAFETY: frames come from the arena, which hands each range to one owner
    // until it is freed; its host mapping is linear and checked both ways.
    unsafe impl PageSource for ArenaPages<'_> {}
}

#[cfg(feature = "std")]
pub use hosted::{ArenaPages, SystemPages};

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use arch_api::{OffsetPhysMap, PhysArena};

    /// The direct map the caller gives is the one used both ways: every
    /// block comes back to the frame it was taken from.
    #[test]
    fn frame_pages_use_the_given_direct_map() {
        let arena = PhysArena::new(64 * 4096, 4096).unwrap();
        let host = arena.phys_to_ptr(PhysArena::BASE) as u64;
        let map = OffsetPhysMap {
            offset: host.wrapping_sub(PhysArena::BASE.as_u64()),
        };
        let pages = FramePages::new(arena, map);
        let arena = pages.frames();
        assert_eq!(*pages.phys_map(), map);
        let a = pages.alloc_pages(4096, 4096).unwrap();
        let b = pages.alloc_pages(4 * 4096, 4 * 4096).unwrap();
        assert_eq!(b.as_ptr() as usize % (4 * 4096), 0);
        // SAFETY: fresh blocks of the sizes asked for.
        unsafe {
            b.as_ptr().write_bytes(0xa5, 4 * 4096);
            pages.free_pages(a, 4096);
        }
        assert_eq!(arena.frames_in_use(), 4);
        // SAFETY: as above.
        unsafe { pages.free_pages(b, 4 * 4096) };
        assert_eq!(arena.frames_in_use(), 0);
    }

    /// Any `PhysMap` works, here the arena's own (not linear from the
    /// allocator's point of view: it is asked, not computed).
    #[test]
    fn frame_pages_over_any_phys_map() {
        let arena = PhysArena::new(64 * 4096, 4096).unwrap();
        let pages = FramePages::new(&arena, &arena);
        let a = pages.alloc_pages(2 * 4096, 2 * 4096).unwrap();
        assert!(!pages.disowns(a.as_ptr() as usize));
        assert!(pages.disowns(&arena as *const PhysArena as usize));
        // SAFETY: a fresh block of that size.
        unsafe { pages.free_pages(a, 2 * 4096) };
        assert_eq!(arena.frames_in_use(), 0);
    }

    /// SystemPages refuses what it did not hand out and frees what it did.
    #[test]
    fn system_pages_checks_frees() {
        let pages = SystemPages::new();
        let blocks: std::vec::Vec<_> = (0..200)
            .map(|i| pages.alloc(4096 * (1 + i % 3), 4096).unwrap())
            .collect();
        assert_eq!(pages.blocks_in_use(), 200);
        assert_eq!(pages.alloc(4096, 16384), Err(FrameError::BadLayout));
        assert_eq!(
            pages.free(PhysAddr::new(0x1000), 4096),
            Err(FrameError::NotAllocated)
        );
        for (i, &b) in blocks.iter().enumerate() {
            let size = 4096 * (1 + i as u64 % 3);
            assert_eq!(pages.free(b, size + 4096), Err(FrameError::NotAllocated));
            pages.free(b, size).unwrap();
            assert_eq!(pages.free(b, size), Err(FrameError::NotAllocated));
        }
        assert_eq!(pages.bytes_in_use(), 0);
    }
}
