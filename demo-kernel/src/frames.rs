//! The kernel's page allocator: a bitmap over the free RAM the arch code
//! reports, one bit per 4 KiB frame, next-fit. It is the `FrameSource` (and,
//! RAM being identity-mapped, the `PhysMap`) behind slab pages, vmalloc
//! backing pages and every page-table page.
//!
//! It must not allocate through the global allocator (slub-core takes its
//! slab pages from here), so its state is a fixed static.

use arch_api::{FrameError, FrameSource, PhysAddr, PhysMap};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use lock_api::RawMutex;

/// The kernel's lock (IRQ-safe on aarch64: the timer interrupt allocates,
/// and a slab refill there reaches this bitmap).
type Mutex<T> = lock_api::Mutex<crate::arch::Lock, T>;

/// Frame size.
pub const FRAME: u64 = 4096;
/// The most RAM managed: 1 GiB (the xtask gives the guest 256 MiB).
const MAX_FRAMES: usize = (1 << 30) / FRAME as usize;

struct Bitmap {
    base: u64,
    frames: usize,
    /// Bit set: frame in use.
    bits: [u64; MAX_FRAMES / 64],
    /// Where the next search starts (next-fit).
    hint: usize,
}

static BITMAP: Mutex<Bitmap> = Mutex::const_new(
    <crate::arch::Lock as RawMutex>::INIT,
    Bitmap {
        base: 0,
        frames: 0,
        bits: [0; MAX_FRAMES / 64],
        hint: 0,
    },
);

/// Frames in use, for the leak checks.
static IN_USE: AtomicU64 = AtomicU64::new(0);

/// Hands `[start, end)` to the allocator. Call once, before any allocation.
pub fn init(start: u64, end: u64) {
    let mut b = BITMAP.lock();
    b.base = start.next_multiple_of(FRAME);
    let frames = (end.saturating_sub(b.base) / FRAME) as usize;
    b.frames = frames.min(MAX_FRAMES);
}

/// Frames allocated and not freed.
pub fn in_use() -> u64 {
    IN_USE.load(Relaxed)
}

/// Frames managed.
pub fn total() -> u64 {
    BITMAP.lock().frames as u64
}

impl Bitmap {
    fn used(&self, i: usize) -> bool {
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: usize, on: bool) {
        if on {
            self.bits[i / 64] |= 1 << (i % 64);
        } else {
            self.bits[i / 64] &= !(1 << (i % 64));
        }
    }

    /// The first free run of `n` frames whose address is a multiple of
    /// `align`, searching from `from` up to `to`.
    fn find(&self, n: usize, align: u64, from: usize, to: usize) -> Option<usize> {
        let mut i = from;
        while i + n <= to {
            // Round `i` up so that `base + i * FRAME` is aligned.
            let addr = self.base + i as u64 * FRAME;
            let aligned = addr.next_multiple_of(align);
            i += ((aligned - addr) / FRAME) as usize;
            if i + n > to {
                return None;
            }
            if n == 1 && self.bits[i / 64] == u64::MAX {
                // A full word: skip it in one step.
                i = (i / 64 + 1) * 64;
                continue;
            }
            match (i..i + n).find(|&j| self.used(j)) {
                None => return Some(i),
                Some(busy) => i = busy + 1,
            }
        }
        None
    }
}

/// The kernel's frames, as a handle (all handles share the one bitmap).
#[derive(Clone, Copy, Debug, Default)]
pub struct Frames;

impl FrameSource for Frames {
    fn granule(&self) -> u64 {
        FRAME
    }

    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        if size == 0 || size % FRAME != 0 || !align.is_power_of_two() {
            return Err(FrameError::BadLayout);
        }
        let align = align.max(FRAME);
        let n = (size / FRAME) as usize;
        let mut b = BITMAP.lock();
        let (hint, frames) = (b.hint, b.frames);
        let start = b
            .find(n, align, hint, frames)
            .or_else(|| b.find(n, align, 0, (hint + n).min(frames)))
            .ok_or(FrameError::OutOfFrames)?;
        for i in start..start + n {
            b.set(i, true);
        }
        b.hint = start + n;
        IN_USE.fetch_add(n as u64, Relaxed);
        Ok(PhysAddr::new(b.base + start as u64 * FRAME))
    }

    /// The RAM handed to [`init`] (set before any allocation, fixed after).
    fn phys_range(&self) -> Option<core::ops::Range<PhysAddr>> {
        let b = BITMAP.lock();
        let end = b.base + b.frames as u64 * FRAME;
        Some(PhysAddr::new(b.base)..PhysAddr::new(end))
    }

    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        let mut b = BITMAP.lock();
        let a = addr.as_u64();
        if size == 0 || size % FRAME != 0 || a % FRAME != 0 || a < b.base {
            return Err(FrameError::NotAllocated);
        }
        let (first, n) = (((a - b.base) / FRAME) as usize, (size / FRAME) as usize);
        if first + n > b.frames || (first..first + n).any(|i| !b.used(i)) {
            return Err(FrameError::NotAllocated);
        }
        for i in first..first + n {
            b.set(i, false);
        }
        IN_USE.fetch_sub(n as u64, Relaxed);
        Ok(())
    }
}

/// RAM is identity-mapped: the direct map has offset 0.
impl PhysMap for Frames {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        addr.as_u64() as *mut u8
    }
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        Some(PhysAddr::new(ptr as u64))
    }
}
