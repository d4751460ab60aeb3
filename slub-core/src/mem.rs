//! The platform's memory handle as the slab layer's page source.
//!
//! An OS hands slub-core one value, `K::Mem` (frames and direct map as one
//! handle); the slab layer asks for a [`PageSource`]. The newtype here is
//! the bridge, so that an OS implements [`Platform`] and nothing else.

use crate::page_source::PageSource;
use arch_api::{FrameError, FrameSource, PhysAddr, PhysMap, Platform};

/// `K::Mem`, by value. Transparent, so a cache holds exactly what it held
/// when it was generic over the page source itself.
#[repr(transparent)]
pub(crate) struct PlatformMem<K: Platform>(pub(crate) K::Mem);

impl<K: Platform> PlatformMem<K> {
    /// The handle the OS passed in.
    #[inline(always)]
    pub(crate) fn get(&self) -> &K::Mem {
        &self.0
    }
}

impl<K: Platform> Clone for PlatformMem<K>
where
    K::Mem: Clone,
{
    #[inline(always)]
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K: Platform> FrameSource for PlatformMem<K> {
    #[inline(always)]
    fn granule(&self) -> u64 {
        self.0.granule()
    }
    #[inline(always)]
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        self.0.alloc(size, align)
    }
    fn alloc_many(&self, size: u64, align: u64, out: &mut [PhysAddr]) -> Result<(), FrameError> {
        self.0.alloc_many(size, align, out)
    }
    #[inline(always)]
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        self.0.free(addr, size)
    }
    fn free_many(&self, ranges: &[(PhysAddr, u64)], failed: &mut dyn FnMut(PhysAddr, FrameError)) {
        self.0.free_many(ranges, failed)
    }
}

impl<K: Platform> PhysMap for PlatformMem<K> {
    #[inline(always)]
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        self.0.phys_to_ptr(addr)
    }
    #[inline(always)]
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.0.ptr_to_phys(ptr)
    }
}

// SAFETY: `Platform`'s safety contract on `Mem` is `PageSource`'s: its
// frames are RAM nobody else uses until freed, `phys_to_ptr` gives a pointer
// valid for the whole block and `ptr_to_phys` is its inverse, and it does
// not allocate through an allocator built on it.
unsafe impl<K: Platform> PageSource for PlatformMem<K> {}
