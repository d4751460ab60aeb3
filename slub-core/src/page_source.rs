//! Where slab pages come from: the [`PageSource`] seam.
//!
//! Slabs are naturally aligned blocks (a slab of `2^k` bytes starts at a
//! multiple of `2^k`), so the slab of any object is `ptr & !(slab_bytes - 1)`,
//! which is what makes the end token work without a `struct page` array.
//! The OS provides the pages; arch-api's [`FrameSource`] with the kernel's
//! direct map ([`OffsetPhysMap`]) plugs in through [`FramePages`]; hosted
//! code uses [`SystemPages`] (host heap through `std::alloc::System`, safe
//! inside a `#[global_allocator]`) or [`ArenaPages`] (arch-api's simulated
//! physical memory).

use arch_api::{FrameSource, OffsetPhysMap, PhysAddr, PhysMap};
use core::ptr::NonNull;

/// A source of naturally aligned page blocks for slabs, per-CPU arrays,
/// sheaves and large kmalloc allocations.
///
/// # Safety
/// `alloc_pages` must return memory that is valid for reads and writes of
/// `size` bytes, aligned to `align`, not used by anyone else until it is
/// passed back to `free_pages`. It must not allocate through the cache that
/// uses it (a `#[global_allocator]` built on this crate must not have a page
/// source that allocates through the global allocator).
pub unsafe trait PageSource: Sync {
    /// The page size: the granule of every request (a power of two).
    fn page_size(&self) -> usize;

    /// `size` bytes (a multiple of [`page_size`](Self::page_size)) aligned to
    /// `align` (a power of two, at least the page size), or `None`.
    fn alloc_pages(&self, size: usize, align: usize) -> Option<NonNull<u8>>;

    /// Returns a block.
    ///
    /// # Safety
    /// `ptr`, `size` and `align` are exactly those of one earlier
    /// successful `alloc_pages` that was not yet freed, and nothing uses the
    /// memory any more.
    unsafe fn free_pages(&self, ptr: NonNull<u8>, size: usize, align: usize);

    /// Whether `addr` lies in memory this source handed out, if the source can
    /// tell cheaply (`None`: unknown). The ownership checks use it so a
    /// foreign pointer is refused before its slab header is read.
    fn owns(&self, addr: usize) -> Option<bool> {
        let _ = addr;
        None
    }
}

// SAFETY: forwards every call to `T`, which upholds the contract.
unsafe impl<T: PageSource + ?Sized> PageSource for &T {
    fn page_size(&self) -> usize {
        (**self).page_size()
    }
    fn alloc_pages(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        (**self).alloc_pages(size, align)
    }
    unsafe fn free_pages(&self, ptr: NonNull<u8>, size: usize, align: usize) {
        // SAFETY: the caller's contract is `T`'s.
        unsafe { (**self).free_pages(ptr, size, align) }
    }
    fn owns(&self, addr: usize) -> Option<bool> {
        (**self).owns(addr)
    }
}

/// An OS's frame allocator and its direct map as a page source.
///
/// The direct map is the one the caller names, an [`OffsetPhysMap`]
/// (`virt = phys + offset`, Linux's `__va`): a block is reached through it
/// when allocated, and its physical address is `virt - offset` when freed.
/// It must be linear because a free only has the virtual address to go on;
/// an identity-mapped kernel passes `OffsetPhysMap { offset: 0 }`.
pub struct FramePages<F> {
    frames: F,
    map: OffsetPhysMap,
}

impl<F> core::fmt::Debug for FramePages<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FramePages")
            .field("map", &self.map)
            .finish_non_exhaustive()
    }
}

impl<F: FrameSource> FramePages<F> {
    /// Slab pages from `frames`, reached through the direct map `map`.
    pub const fn new(frames: F, map: OffsetPhysMap) -> Self {
        Self { frames, map }
    }

    /// The wrapped source.
    pub fn frames(&self) -> &F {
        &self.frames
    }

    /// The direct map in use.
    pub fn phys_map(&self) -> OffsetPhysMap {
        self.map
    }
}

// SAFETY: frames come from the OS's `FrameSource`, which hands each range to
// one owner until freed; the caller's direct map gives the kernel's mapping
// of them, and its offset takes a pointer back to the frame it maps.
unsafe impl<F: FrameSource> PageSource for FramePages<F> {
    fn page_size(&self) -> usize {
        self.frames.granule() as usize
    }

    fn alloc_pages(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        let phys = self.frames.alloc(size as u64, align as u64).ok()?;
        NonNull::new(self.map.phys_to_ptr(phys))
    }

    unsafe fn free_pages(&self, ptr: NonNull<u8>, size: usize, _align: usize) {
        let phys = (ptr.as_ptr() as u64).wrapping_sub(self.map.offset);
        // A failure here means the caller broke the contract; there is
        // nothing useful to do with it in a free path.
        let _ = self.frames.free(PhysAddr::new(phys), size as u64);
    }
}

#[cfg(feature = "std")]
mod hosted {
    use super::*;
    use core::sync::atomic::{AtomicUsize, Ordering};
    use std::alloc::{GlobalAlloc, Layout, System};

    /// Host heap pages straight from `std::alloc::System` (not through the
    /// global allocator, so it can back a `#[global_allocator]`). Counts the
    /// bytes and blocks it has out, for leak checks.
    #[derive(Debug, Default)]
    pub struct SystemPages {
        bytes: AtomicUsize,
        blocks: AtomicUsize,
    }

    impl SystemPages {
        /// A source with nothing allocated.
        pub const fn new() -> Self {
            Self {
                bytes: AtomicUsize::new(0),
                blocks: AtomicUsize::new(0),
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
    }

    // SAFETY: `System` returns fresh, exclusively owned memory of the layout
    // asked for; the block is passed back with the same layout.
    unsafe impl PageSource for SystemPages {
        fn page_size(&self) -> usize {
            4096
        }

        fn alloc_pages(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
            let layout = Layout::from_size_align(size, align).ok()?;
            if size == 0 {
                return None;
            }
            // SAFETY: non-zero size checked above.
            let p = NonNull::new(unsafe { System.alloc(layout) })?;
            self.bytes.fetch_add(size, Ordering::Relaxed);
            self.blocks.fetch_add(1, Ordering::Relaxed);
            Some(p)
        }

        unsafe fn free_pages(&self, ptr: NonNull<u8>, size: usize, align: usize) {
            // SAFETY: the caller passes back a block from `alloc_pages` with the
            // same size and alignment, so the layout is valid and matches.
            unsafe { System.dealloc(ptr.as_ptr(), Layout::from_size_align_unchecked(size, align)) };
            self.bytes.fetch_sub(size, Ordering::Relaxed);
            self.blocks.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// arch-api's simulated physical memory as a page source; knows which
    /// addresses it owns, so foreign pointers are refused without a read.
    pub struct ArenaPages<'a> {
        arena: &'a arch_api::PhysArena,
        host_base: usize,
        host_len: usize,
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
            let host_base = arena.phys_to_ptr(arch_api::PhysArena::BASE) as usize;
            let host_len = (arena.total_frames() * arena.granule()) as usize;
            Self {
                arena,
                host_base,
                host_len,
            }
        }

        /// Frames of the arena currently allocated.
        pub fn frames_in_use(&self) -> u64 {
            self.arena.frames_in_use()
        }
    }

    // SAFETY: frames come from the arena, which hands each range to one owner
    // until it is freed; the host mapping is linear from `host_base`.
    unsafe impl PageSource for ArenaPages<'_> {
        fn page_size(&self) -> usize {
            self.arena.granule() as usize
        }
        fn alloc_pages(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
            let phys = self.arena.alloc(size as u64, align as u64).ok()?;
            NonNull::new(self.arena.phys_to_ptr(phys))
        }
        unsafe fn free_pages(&self, ptr: NonNull<u8>, size: usize, _align: usize) {
            let phys = arch_api::PhysArena::BASE.as_u64()
                + (ptr.as_ptr() as usize - self.host_base) as u64;
            let _ = self.arena.free(PhysAddr::new(phys), size as u64);
        }
        fn owns(&self, addr: usize) -> Option<bool> {
            Some(addr.wrapping_sub(self.host_base) < self.host_len)
        }
    }
}

#[cfg(feature = "std")]
pub use hosted::{ArenaPages, SystemPages};

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use arch_api::PhysArena;

    /// The offset the caller gives is the one used both ways: every block
    /// comes back to the frame it was taken from, whatever was allocated
    /// first.
    #[test]
    fn frame_pages_use_the_given_direct_map() {
        let arena = PhysArena::new(64 * 4096, 4096).unwrap();
        let host = arena.phys_to_ptr(PhysArena::BASE) as u64;
        let map = OffsetPhysMap {
            offset: host.wrapping_sub(PhysArena::BASE.as_u64()),
        };
        let pages = FramePages::new(arena, map);
        let arena = pages.frames();
        assert_eq!(pages.phys_map(), map);
        let a = pages.alloc_pages(4096, 4096).unwrap();
        let b = pages.alloc_pages(4 * 4096, 4 * 4096).unwrap();
        assert_eq!(b.as_ptr() as usize % (4 * 4096), 0);
        // SAFETY: fresh blocks of the sizes asked for.
        unsafe {
            b.as_ptr().write_bytes(0xa5, 4 * 4096);
            pages.free_pages(a, 4096, 4096);
        }
        assert_eq!(arena.frames_in_use(), 4);
        // SAFETY: as above.
        unsafe { pages.free_pages(b, 4 * 4096, 4 * 4096) };
        assert_eq!(arena.frames_in_use(), 0);
    }
}
