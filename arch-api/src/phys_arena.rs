//! Simulated physical memory backed by host memory (hosted only).
//!
//! The hosted walker, vmalloc and slab page sources all draw frames from one
//! arena, and [`PhysMap::phys_to_ptr`] gives the host pointer behind a frame,
//! so a workload really writes to the memory it mapped. Physical addresses
//! start at [`PhysArena::BASE`], not 0, so code that confuses a physical
//! address with a pointer faults instead of appearing to work.
//!
//! The host memory is one zeroed allocation, which the host OS backs lazily:
//! an arena of gigabytes costs only the frames actually touched.

use crate::{FrameError, FrameSource, PhysAddr, PhysMap};
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::vec;
use std::vec::Vec;

/// Simulated physical memory: `frames` frames of `granule` bytes.
pub struct PhysArena {
    host: NonNull<u8>,
    layout: Layout,
    granule: u64,
    frames: u64,
    in_use: AtomicU64,
    state: Mutex<ArenaState>,
}

struct ArenaState {
    /// One bit per frame, set when allocated.
    bitmap: Vec<u64>,
    /// No free frame below this index (a search start, not a promise above it).
    hint: u64,
}

// SAFETY: the host allocation is owned by the arena and only reached through
// raw pointers handed to callers, whose use is their responsibility (as with
// physical memory); the allocator state is behind a Mutex and an atomic.
unsafe impl Send for PhysArena {}
// SAFETY: as above; every shared-state mutation goes through the Mutex.
unsafe impl Sync for PhysArena {}

impl core::fmt::Debug for PhysArena {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PhysArena")
            .field("granule", &self.granule)
            .field("frames", &self.frames)
            .field("in_use", &self.frames_in_use())
            .finish()
    }
}

impl PhysArena {
    /// The physical address of the first frame.
    pub const BASE: PhysAddr = PhysAddr::new(0x1_0000_0000);

    /// An arena of `bytes` (rounded down to whole frames) in frames of
    /// `granule` bytes (a power of two, at least 4 KiB and at most 1 GiB).
    pub fn new(bytes: u64, granule: u64) -> Result<Self, FrameError> {
        if !granule.is_power_of_two() || !(4096..=1 << 30).contains(&granule) {
            return Err(FrameError::BadLayout);
        }
        let frames = bytes / granule;
        if frames == 0 {
            return Err(FrameError::BadLayout);
        }
        // Align the host block like the largest block a layout maps (1 GiB is
        // excessive for a host allocation; 2 MiB lets the host use huge pages).
        let align = granule.max(2 << 20) as usize;
        let layout = Layout::from_size_align((frames * granule) as usize, align)
            .map_err(|_| FrameError::BadLayout)?;
        // SAFETY: the layout has a non-zero size (frames >= 1, granule >= 4096).
        let host = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(FrameError::OutOfFrames)?;
        Ok(Self {
            host,
            layout,
            granule,
            frames,
            in_use: AtomicU64::new(0),
            state: Mutex::new(ArenaState {
                bitmap: vec![0; frames.div_ceil(64) as usize],
                hint: 0,
            }),
        })
    }

    /// Frames currently allocated (for leak checks).
    pub fn frames_in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Bytes currently allocated.
    pub fn bytes_in_use(&self) -> u64 {
        self.frames_in_use() * self.granule
    }

    /// Total frames.
    pub fn total_frames(&self) -> u64 {
        self.frames
    }

    /// Whether `[addr, addr + size)` lies inside the arena.
    pub fn contains(&self, addr: PhysAddr, size: u64) -> bool {
        let base = Self::BASE.as_u64();
        addr.as_u64() >= base
            && addr
                .as_u64()
                .checked_add(size)
                .is_some_and(|end| end <= base + self.frames * self.granule)
    }

    fn frames_for(&self, size: u64) -> Result<u64, FrameError> {
        if size == 0 || size % self.granule != 0 {
            return Err(FrameError::BadLayout);
        }
        Ok(size / self.granule)
    }
}

impl ArenaState {
    fn is_set(&self, i: u64) -> bool {
        self.bitmap[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn set_range(&mut self, start: u64, count: u64, on: bool) {
        for i in start..start + count {
            let (w, b) = ((i / 64) as usize, i % 64);
            if on {
                self.bitmap[w] |= 1 << b;
            } else {
                self.bitmap[w] &= !(1 << b);
            }
        }
    }

    /// First-fit: the lowest `align`-aligned run of `count` free frames.
    fn find_run(&self, frames: u64, count: u64, align: u64) -> Option<u64> {
        let mut start = self.hint.next_multiple_of(align);
        while start + count <= frames {
            // Skip whole allocated words quickly for single frames.
            if count == 1 && align == 1 && self.bitmap[(start / 64) as usize] == u64::MAX {
                start = (start / 64 + 1) * 64;
                continue;
            }
            match (start..start + count).find(|&i| self.is_set(i)) {
                Some(busy) => start = (busy + 1).next_multiple_of(align),
                None => return Some(start),
            }
        }
        None
    }
}

impl FrameSource for PhysArena {
    fn granule(&self) -> u64 {
        self.granule
    }

    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        let count = self.frames_for(size)?;
        if !align.is_power_of_two() {
            return Err(FrameError::BadLayout);
        }
        let align_frames = (align / self.granule).max(1);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let start = st
            .find_run(self.frames, count, align_frames)
            .ok_or(FrameError::OutOfFrames)?;
        st.set_range(start, count, true);
        if start == st.hint {
            st.hint = start + count;
        }
        self.in_use.fetch_add(count, Ordering::Relaxed);
        Ok(PhysAddr::new(Self::BASE.as_u64() + start * self.granule))
    }

    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        let count = self.frames_for(size)?;
        if !self.contains(addr, size) || !addr.is_aligned(self.granule) {
            return Err(FrameError::NotAllocated);
        }
        let start = (addr.as_u64() - Self::BASE.as_u64()) / self.granule;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if (start..start + count).any(|i| !st.is_set(i)) {
            return Err(FrameError::NotAllocated);
        }
        st.set_range(start, count, false);
        st.hint = st.hint.min(start);
        self.in_use.fetch_sub(count, Ordering::Relaxed);
        Ok(())
    }
}

impl PhysMap for PhysArena {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        debug_assert!(self.contains(addr, 1), "{addr:?} is outside the arena");
        let off = addr.as_u64().wrapping_sub(Self::BASE.as_u64()) as usize;
        self.host.as_ptr().wrapping_add(off)
    }
}

impl Drop for PhysArena {
    fn drop(&mut self) {
        // SAFETY: `host` was returned by `alloc_zeroed` with exactly `layout`
        // and is freed once, here.
        unsafe { dealloc(self.host.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K4: u64 = 4096;

    #[test]
    fn alloc_free_accounting_and_alignment() {
        let a = PhysArena::new(64 * K4, K4).unwrap();
        let one = a.alloc(K4, K4).unwrap();
        assert_eq!(one, PhysArena::BASE);
        let big = a.alloc(4 * K4, 4 * K4).unwrap();
        assert!(big.is_aligned(4 * K4));
        assert_eq!(a.frames_in_use(), 5);
        assert_eq!(a.free(one, K4), Ok(()));
        assert_eq!(
            a.free(one, K4),
            Err(FrameError::NotAllocated),
            "double free is caught"
        );
        assert_eq!(a.free(big, 4 * K4), Ok(()));
        assert_eq!(a.frames_in_use(), 0);
        assert_eq!(a.alloc(0, K4), Err(FrameError::BadLayout));
        assert_eq!(a.alloc(100, K4), Err(FrameError::BadLayout));
        assert_eq!(a.alloc(K4, 3), Err(FrameError::BadLayout));
    }

    #[test]
    fn exhaustion_is_an_error_and_frees_make_room() {
        let a = PhysArena::new(8 * K4, K4).unwrap();
        let frames: Vec<_> = (0..8).map(|_| a.alloc(K4, K4).unwrap()).collect();
        assert_eq!(a.alloc(K4, K4), Err(FrameError::OutOfFrames));
        a.free(frames[3], K4).unwrap();
        assert_eq!(a.alloc(K4, K4), Ok(frames[3]));
        assert_eq!(a.alloc(2 * K4, K4), Err(FrameError::OutOfFrames));
    }

    #[test]
    fn memory_is_real_and_distinct_per_frame() {
        let a = PhysArena::new(16 * K4, K4).unwrap();
        let f1 = a.alloc(K4, K4).unwrap();
        let f2 = a.alloc(K4, K4).unwrap();
        let (p1, p2) = (a.phys_to_ptr(f1), a.phys_to_ptr(f2));
        // SAFETY: both frames are allocated from `a`, K4 bytes each, and only
        // this test uses them.
        unsafe {
            p1.write_bytes(0xaa, K4 as usize);
            p2.write_bytes(0x55, K4 as usize);
            assert_eq!(*p1.add(K4 as usize - 1), 0xaa);
            assert_eq!(*p2, 0x55);
        }
        assert_eq!(p2 as usize - p1 as usize, K4 as usize);
    }

    #[test]
    fn bad_arena_sizes_are_errors() {
        assert!(PhysArena::new(K4, 1000).is_err());
        assert!(PhysArena::new(100, K4).is_err());
    }
}
