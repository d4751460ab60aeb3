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

/// What a platform's `Mem` is to slub-core: the memory a
/// [`KmemCache`](crate::KmemCache), [`Kmalloc`](crate::Kmalloc) or
/// [`SlubGlobalAlloc`](crate::SlubGlobalAlloc) draws its pages from, the
/// OS's [`FrameSource`] together with its direct map [`PhysMap`] as one
/// handle. An OS does not implement this trait (its
/// [`Platform`](arch_api::Platform) implementation makes the same promise
/// for its `Mem`); the sources here ([`FramePages`], and hosted
/// `SystemPages` and `ArenaPages`) implement it to say they keep it, so a
/// platform that names one of them can rely on that.
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
///   barn's lock** (the platform's raw lock `K::Lock`), freed by `destroy` under the barn's
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
mod hosted;

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
