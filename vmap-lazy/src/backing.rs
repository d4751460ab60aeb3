//! `VmallocMem`: the OS's frame source and direct map, as vmalloc uses them.
//!
//! An adapter over the caller's [`FrameSource`] + [`PhysMap`]. zap-walker
//! returns every frame it unmaps to its frame source; that is right for
//! `vfree` (vmalloc owns the backing frames) but wrong for `vunmap`, whose
//! frames belong to the caller of `vmap`. While vmap-lazy zaps a `vmap` area
//! it switches this adapter to keep frees ([`set_keep_frees`]), so the frames
//! stay the caller's. The mode is the page-table lock holder's: vmalloc's own
//! frees outside that lock (unwinding a failed `vmalloc`) bypass it
//! ([`free_owned`]), or a `vunmap` running on another CPU would drop them.
//! It also counts the bytes it hands out, for leak checks.
//!
//! [`set_keep_frees`]: VmallocMem::set_keep_frees
//! [`free_owned`]: VmallocMem::free_owned

use arch_api::{FrameError, FrameSource, PhysAddr, PhysMap};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A frame source + direct map that can keep the frees of a `vunmap`.
pub struct VmallocMem<'m, M: FrameSource + PhysMap + ?Sized> {
    mem: &'m M,
    keep_frees: AtomicBool,
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
            keep_frees: AtomicBool::new(false),
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

    /// While on, frees are accepted and dropped (the frames are the
    /// caller's). Only the holder of the page-table lock switches it, and it
    /// is meant only for the walker's frees under that lock: any other free
    /// made meanwhile (from another CPU, without the lock) would be dropped
    /// too, so those use [`free_owned`](Self::free_owned).
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn set_keep_frees(&self, on: bool) {
        self.keep_frees.store(on, Ordering::Relaxed);
    }

    /// Returns a frame vmalloc took and owns (the unwinding of a failed
    /// vmalloc), whatever a concurrent `vunmap` has set: the keep-frees
    /// mode belongs to the page-table lock holder, not to this caller.
    pub(crate) fn free_owned(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        self.mem.free(addr, size)?;
        self.bytes_out.fetch_sub(size, Ordering::Relaxed);
        Ok(())
    }
}

impl<M: FrameSource + PhysMap + ?Sized> VmallocMem<'_, M> {
    /// Returns frames of `size` bytes vmalloc owns (a frame cache's spill or
    /// drain) with one `free_many` per 16 frames, whatever a concurrent
    /// `vunmap` has set, as [`free_owned`](Self::free_owned). A frame the
    /// source refuses stays counted as out, so leak checks see it.
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn free_many_owned(&self, frames: &[PhysAddr], size: u64) {
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
        if self.keep_frees.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.free_owned(addr, size)
    }

    fn free_many(&self, ranges: &[(PhysAddr, u64)], failed: &mut dyn FnMut(PhysAddr, FrameError)) {
        if self.keep_frees.load(Ordering::Relaxed) {
            return;
        }
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
