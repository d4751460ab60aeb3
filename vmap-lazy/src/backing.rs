//! `VmallocMem`: the OS's frame source and direct map, as vmalloc uses them.
//!
//! An adapter over the caller's [`FrameSource`] + [`PhysMap`] that counts
//! the bytes it hands out, for leak checks. It has no modes: every free
//! through it returns memory vmalloc owns. Frames vmalloc was lent (a
//! `vmap` of the caller's pages) never reach it: `vunmap` zaps them into a
//! [`Lent`](zap_walker::Lent) sink, for that one call.

use arch_api::{FrameError, FrameSource, PhysAddr, PhysMap};
use core::sync::atomic::{AtomicU64, Ordering};

/// The OS's frame source + direct map, counting what vmalloc holds.
pub struct VmallocMem<'m, M: FrameSource + PhysMap + ?Sized> {
    mem: &'m M,
    bytes_out: AtomicU64,
}

impl<M: FrameSource + PhysMap + ?Sized> core::fmt::Debug for VmallocMem<'_, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VmallocMem")
            .field("bytes_out", &self.bytes_out())
            .finish()
    }
}

impl<'m, M: FrameSource + PhysMap + ?Sized> VmallocMem<'m, M> {
    /// Wraps the OS's memory.
    pub const fn new(mem: &'m M) -> Self {
        Self {
            mem,
            bytes_out: AtomicU64::new(0),
        }
    }

    /// The wrapped memory.
    pub fn inner(&self) -> &'m M {
        self.mem
    }

    /// Bytes handed out through this adapter and not yet returned (backing
    /// frames and page-table pages).
    pub fn bytes_out(&self) -> u64 {
        self.bytes_out.load(Ordering::Relaxed)
    }
}

impl<M: FrameSource + PhysMap + ?Sized> VmallocMem<'_, M> {
    /// Returns frames of `size` bytes vmalloc owns (a vfree's, a frame
    /// cache's spill or drain) with one `free_many` per 16 frames. A frame
    /// the source refuses stays counted as out, so leak checks see it.
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn free_frames(&self, frames: &[PhysAddr], size: u64) {
        // 16 at a time: a vfree's frames in one call, and a buffer small
        // enough to set up inline (64 entries cost a 1 KiB memset per call).
        for chunk in frames.chunks(16) {
            let mut ranges = [(PhysAddr::new(0), 0u64); 16];
            for (r, f) in ranges.iter_mut().zip(chunk) {
                *r = (*f, size);
            }
            let mut returned = size * chunk.len() as u64;
            self.mem
                .free_many(&ranges[..chunk.len()], &mut |_, _| returned -= size);
            self.bytes_out.fetch_sub(returned, Ordering::Relaxed);
        }
    }
}

impl<M: FrameSource + PhysMap + ?Sized> FrameSource for VmallocMem<'_, M> {
    fn granule(&self) -> u64 {
        self.mem.granule()
    }

    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        let a = self.mem.alloc(size, align)?;
        self.bytes_out.fetch_add(size, Ordering::Relaxed);
        Ok(a)
    }

    fn alloc_many(&self, size: u64, align: u64, out: &mut [PhysAddr]) -> Result<(), FrameError> {
        self.mem.alloc_many(size, align, out)?;
        self.bytes_out
            .fetch_add(size * out.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        self.mem.free(addr, size)?;
        self.bytes_out.fetch_sub(size, Ordering::Relaxed);
        Ok(())
    }

    fn free_many(&self, ranges: &[(PhysAddr, u64)], failed: &mut dyn FnMut(PhysAddr, FrameError)) {
        let mut returned: u64 = ranges.iter().map(|r| r.1).sum();
        self.mem.free_many(ranges, &mut |addr, e| {
            // Rare: find what was refused so it stays counted as out.
            if let Some(r) = ranges.iter().find(|r| r.0 == addr) {
                returned -= r.1;
            }
            failed(addr, e);
        });
        self.bytes_out.fetch_sub(returned, Ordering::Relaxed);
    }
}

impl<M: FrameSource + PhysMap + ?Sized> PhysMap for VmallocMem<'_, M> {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        self.mem.phys_to_ptr(addr)
    }
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.mem.ptr_to_phys(ptr)
    }
}
