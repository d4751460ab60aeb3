//! Physical frames: where they come from and how the kernel reaches them.

use crate::PhysAddr;

/// Why a frame request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// No run of free frames large enough.
    OutOfFrames,
    /// Size zero, or size / alignment not a multiple of the granule, or
    /// alignment not a power of two.
    BadLayout,
    /// The range freed was not allocated (double free, or not from this source).
    NotAllocated,
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            FrameError::OutOfFrames => "out of physical frames",
            FrameError::BadLayout => {
                "frame size or alignment is not a power-of-two multiple of the granule"
            }
            FrameError::NotAllocated => "freed range was not allocated from this source",
        })
    }
}

/// The OS's page allocator, as the walker (table pages), vmalloc (backing
/// pages) and the slab allocator (slab pages) see it.
///
/// The one convention every memory source of the workspace follows:
/// physical addresses ([`PhysAddr`], reached through the platform's
/// [`PhysMap`]), sizes and alignments in bytes as `u64`, failures as
/// [`FrameError`], `&self` with the implementor's own locking (it is called
/// concurrently from any CPU). slub-core's `PageSource` is this trait plus
/// a `PhysMap`; vmap-core's `NodeSource` follows the same shape for tree
/// nodes.
///
/// Frames are not zeroed: a user that needs zeroed memory (page tables do)
/// clears it through [`PhysMap`].
///
/// # What it must serve, and when it is called
///
/// Every size is a multiple of [`granule`](Self::granule) and every
/// alignment a power of two; a range is freed with the size it was
/// allocated with.
///
/// * The page-table walker (zap-walker): one frame of the table size
///   (`max(table bytes, granule)`: 4 KiB for x86_64 and the aarch64 4K
///   granule) **aligned to its size** per new table, freed when the table
///   is emptied (or kept in the walker's small stock); and one store for
///   its live counts, a power of two of at least `max(128, granule)` bytes
///   aligned to `min(granule, size)`, reallocated larger as tables are
///   added. Called with the walker borrowed mutably, i.e. under the lock
///   its owner keeps it behind (vmalloc's page-table lock).
/// * The zap's TLB gather: the unmapped frames, through
///   [`free_many`](Self::free_many) once per batch, after the batch's TLB
///   flush.
/// * vmalloc (vmap-lazy): base pages (`PAGE_SIZE`, aligned to it), all of an
///   area at once through [`alloc_many`](Self::alloc_many), before the
///   page-table lock is taken; small areas on the sharded front go through
///   a per-node frame cache that refills in batches under its own lock;
///   freed with `free_many` after the flush.
/// * The slab allocator (slub-core): slab pages of `2^order` granules
///   aligned to their size, per-CPU arrays, sheaf pool pages and large
///   `kmalloc` blocks, from its slow paths only (its `PageSource` docs list
///   sizes and locks held).
pub trait FrameSource: Sync {
    /// The smallest unit handed out, in bytes (a power of two).
    fn granule(&self) -> u64;

    /// Allocates `size` bytes of contiguous frames aligned to `align` bytes.
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError>;

    /// Fills `out` with frames of `size` bytes aligned to `align`, one
    /// [`alloc`](Self::alloc) each: all of them or, on error, none (those
    /// taken are returned before the error is). A source behind a lock
    /// takes it once (vmalloc asks for all its pages at once).
    fn alloc_many(&self, size: u64, align: u64, out: &mut [PhysAddr]) -> Result<(), FrameError> {
        for i in 0..out.len() {
            match self.alloc(size, align) {
                Ok(f) => out[i] = f,
                Err(e) => {
                    for &f in &out[..i] {
                        // Just taken from this source: cannot be refused.
                        let _ = self.free(f, size);
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Returns a range obtained from [`alloc`](Self::alloc) with the same `size`.
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError>;

    /// The physical range every frame this source hands out lies in, if it
    /// can tell (Linux's `[min_low_pfn, max_pfn)`): a user can then keep
    /// per-frame metadata in an array indexed by frame number, as `struct
    /// page` is (the walker keeps its tables' live counts so). `None`, the
    /// default, leaves such a user to a keyed store. The range must not
    /// change while the source is in use.
    fn phys_range(&self) -> Option<core::ops::Range<PhysAddr>> {
        None
    }

    /// Returns a batch of `(addr, size)` ranges, as a TLB gather does after
    /// its flush (Linux's `release_pages`): a source behind a lock takes it
    /// once for the whole batch. Every range is attempted; each one refused
    /// is passed to `failed` with the reason, the rest are freed. The
    /// default frees them one by one.
    fn free_many(&self, ranges: &[(PhysAddr, u64)], failed: &mut dyn FnMut(PhysAddr, FrameError)) {
        for &(addr, size) in ranges {
            if let Err(e) = self.free(addr, size) {
                failed(addr, e);
            }
        }
    }
}

/// How the kernel reaches physical memory (Linux's direct map: `__va` one
/// way, `__pa` the other).
///
/// Both directions are needed: page tables go from the physical address in
/// an entry to the table's memory ([`phys_to_ptr`](Self::phys_to_ptr)); a
/// slab page is freed with only the pointer the slab allocator used
/// ([`ptr_to_phys`](Self::ptr_to_phys)). The map is the OS's; no user guesses
/// an offset.
pub trait PhysMap: Sync {
    /// A pointer through which the frame at `addr` can be read and written
    /// (`__va`). Only meaningful for addresses the matching [`FrameSource`]
    /// handed out.
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8;

    /// The physical address `ptr` maps (`__pa`): the inverse of
    /// [`phys_to_ptr`](Self::phys_to_ptr), so
    /// `ptr_to_phys(phys_to_ptr(a)) == Some(a)` for every address `a` the
    /// matching [`FrameSource`] handed out.
    ///
    /// `None` when `ptr` is not in the direct map. A map that can tell
    /// cheaply says so (the slab allocator then refuses a foreign pointer
    /// without reading its memory); one that cannot may answer `Some` for
    /// any pointer.
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr>;
}

impl<T: PhysMap + ?Sized> PhysMap for &T {
    #[inline]
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        (**self).phys_to_ptr(addr)
    }
    #[inline]
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        (**self).ptr_to_phys(ptr)
    }
}

impl<T: FrameSource + ?Sized> FrameSource for &T {
    #[inline]
    fn granule(&self) -> u64 {
        (**self).granule()
    }
    #[inline]
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        (**self).alloc(size, align)
    }
    fn alloc_many(&self, size: u64, align: u64, out: &mut [PhysAddr]) -> Result<(), FrameError> {
        (**self).alloc_many(size, align, out)
    }
    #[inline]
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        (**self).free(addr, size)
    }
    #[inline]
    fn phys_range(&self) -> Option<core::ops::Range<PhysAddr>> {
        (**self).phys_range()
    }
    fn free_many(&self, ranges: &[(PhysAddr, u64)], failed: &mut dyn FnMut(PhysAddr, FrameError)) {
        (**self).free_many(ranges, failed)
    }
}

/// A linear direct map: `virt = phys + offset` (bare-metal kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetPhysMap {
    /// Added to a physical address to get its direct-map virtual address.
    pub offset: u64,
}

impl PhysMap for OffsetPhysMap {
    #[inline]
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        addr.as_u64().wrapping_add(self.offset) as *mut u8
    }

    /// `ptr - offset`; a linear map cannot tell a foreign pointer, so never `None`.
    #[inline]
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        Some(PhysAddr::new((ptr as u64).wrapping_sub(self.offset)))
    }
}
