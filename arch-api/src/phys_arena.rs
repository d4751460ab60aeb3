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
    /// `log2(granule)`: frees divide by the granule per frame.
    granule_shift: u32,
    frames: u64,
    /// Frames handed out: read without the lock, written only under it
    /// (`count_in_use`).
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
            granule_shift: granule.trailing_zeros(),
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
    #[inline]
    pub fn contains(&self, addr: PhysAddr, size: u64) -> bool {
        let base = Self::BASE.as_u64();
        addr.as_u64() >= base
            && addr
                .as_u64()
                .checked_add(size)
                .is_some_and(|end| end <= base + self.frames * self.granule)
    }

    #[inline]
    fn frames_for(&self, size: u64) -> Result<u64, FrameError> {
        if size == 0 || size & (self.granule - 1) != 0 {
            return Err(FrameError::BadLayout);
        }
        Ok(size >> self.granule_shift)
    }
}

impl ArenaState {
    /// The words the frames `[start, start + count)` occupy, each with the
    /// mask of the run's bits in it.
    fn words(start: u64, count: u64) -> impl Iterator<Item = (usize, u64)> {
        let end = start + count;
        let mut i = start;
        core::iter::from_fn(move || {
            if i >= end {
                return None;
            }
            let (w, b) = (i / 64, i % 64);
            let n = (end - i).min(64 - b);
            i += n;
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << b
            };
            Some((w as usize, mask))
        })
    }

    /// The word and mask of `[start, start + count)` when the run lies in
    /// one word (every base page and page table of the hosted workloads).
    #[inline(always)]
    fn one_word(start: u64, count: u64) -> Option<(usize, u64)> {
        let b = start % 64;
        (count < 64 && b + count <= 64).then(|| ((start / 64) as usize, ((1u64 << count) - 1) << b))
    }

    #[inline]
    fn all_set(&self, start: u64, count: u64) -> bool {
        if let Some((w, m)) = Self::one_word(start, count) {
            return self.bitmap[w] & m == m;
        }
        Self::words(start, count).all(|(w, m)| self.bitmap[w] & m == m)
    }

    #[inline]
    fn set_range(&mut self, start: u64, count: u64, on: bool) {
        if let Some((w, m)) = Self::one_word(start, count) {
            if on {
                self.bitmap[w] |= m;
            } else {
                self.bitmap[w] &= !m;
            }
            return;
        }
        for (w, m) in Self::words(start, count) {
            if on {
                self.bitmap[w] |= m;
            } else {
                self.bitmap[w] &= !m;
            }
        }
    }

    /// The first allocated frame in `[start, start + count)`, if any.
    fn first_set(&self, start: u64, count: u64) -> Option<u64> {
        Self::words(start, count).find_map(|(w, m)| {
            let busy = self.bitmap[w] & m;
            (busy != 0).then(|| w as u64 * 64 + u64::from(busy.trailing_zeros()))
        })
    }

    /// First-fit: the lowest `align`-aligned run of `count` free frames.
    fn find_run(&self, frames: u64, count: u64, align: u64) -> Option<u64> {
        if count <= align && align <= 64 {
            return self.find_run_in_words(frames, count, align);
        }
        let mut start = self.hint.next_multiple_of(align);
        while start + count <= frames {
            match self.first_set(start, count) {
                Some(busy) => start = (busy + 1).next_multiple_of(align),
                None => return Some(start),
            }
        }
        None
    }

    /// [`find_run`](Self::find_run) when an aligned run cannot cross a word
    /// (`count <= align <= 64`, both powers of two): word by word, the
    /// positions that start `count` clear bits, at aligned offsets, from the
    /// hint on — a page table or a base page costs a few word operations
    /// instead of a probe per aligned slot.
    fn find_run_in_words(&self, frames: u64, count: u64, align: u64) -> Option<u64> {
        // Bit i set when offset i is a multiple of `align`.
        let aligned = u64::MAX / ((1u128 << align) - 1) as u64;
        let w0 = (self.hint / 64) as usize;
        let below_hint = (1u64 << (self.hint % 64)) - 1;
        for (i, &word) in self.bitmap[w0..].iter().enumerate() {
            let free = if i == 0 { !(word | below_hint) } else { !word };
            // Shift-and: bit j stays set when bits j .. j + count are clear.
            let (mut run, mut have) = (free, 1);
            while have < count {
                let step = have.min(count - have);
                run &= run >> step;
                have += step;
            }
            run &= aligned;
            if run != 0 {
                let f = (w0 + i) as u64 * 64 + u64::from(run.trailing_zeros());
                return (f + count <= frames).then_some(f);
            }
        }
        None
    }

    /// Clears `count` frames at `start` after checking every one is set.
    #[inline(always)]
    fn release(&mut self, start: u64, count: u64) -> Result<(), FrameError> {
        if count == 1 {
            // One frame (the common free): one bit.
            let (w, bit) = ((start / 64) as usize, 1u64 << (start % 64));
            if self.bitmap[w] & bit == 0 {
                return Err(FrameError::NotAllocated);
            }
            self.bitmap[w] &= !bit;
            self.hint = self.hint.min(start);
            return Ok(());
        }
        if !self.all_set(start, count) {
            return Err(FrameError::NotAllocated);
        }
        self.set_range(start, count, false);
        self.hint = self.hint.min(start);
        Ok(())
    }
}

impl PhysArena {
    /// Adds `plus` and subtracts `minus` frames in use. Called with the
    /// state lock held (`_held` proves it): the lock holders are the only
    /// writers, so a load and a store do, without the LOCKed
    /// read-modify-write a bare atomic add would cost on every call.
    #[inline]
    fn count_in_use(&self, _held: &ArenaState, plus: u64, minus: u64) {
        let n = self.in_use.load(Ordering::Relaxed);
        self.in_use.store(n + plus - minus, Ordering::Relaxed);
    }

    /// Fills `out` with the lowest free single frames at or above the hint,
    /// all or none. Every free frame between the hint and the last one taken
    /// is taken, so the hint moves past the last one.
    fn take_single_frames(
        &self,
        st: &mut ArenaState,
        out: &mut [PhysAddr],
    ) -> Result<(), FrameError> {
        let mut w = (st.hint / 64) as usize;
        // Bits below the hint count as busy in its word.
        let mut below = (1u64 << (st.hint % 64)) - 1;
        let (mut taken, mut last) = (0, 0);
        while taken < out.len() {
            let Some(&word) = st.bitmap.get(w) else { break };
            let mut free = !(word | below);
            below = 0;
            let mut set = 0;
            while free != 0 && taken < out.len() {
                let f = w as u64 * 64 + u64::from(free.trailing_zeros());
                if f >= self.frames {
                    break;
                }
                set |= free & free.wrapping_neg();
                free &= free - 1;
                out[taken] = PhysAddr::new(Self::BASE.as_u64() + (f << self.granule_shift));
                taken += 1;
                last = f;
            }
            st.bitmap[w] |= set;
            if taken < out.len() {
                if free != 0 {
                    break; // the free bits left lie past the last frame
                }
                w += 1;
            }
        }
        if taken < out.len() {
            for f in &out[..taken] {
                let start = (f.as_u64() - Self::BASE.as_u64()) >> self.granule_shift;
                // Just set above: cannot be refused.
                let _ = st.release(start, 1);
            }
            return Err(FrameError::OutOfFrames);
        }
        if taken > 0 {
            st.hint = st.hint.max(last + 1);
        }
        Ok(())
    }

    /// The frame index and count of a range to free, if it is a granule
    /// multiple inside the arena.
    #[inline]
    fn frame_span(&self, addr: PhysAddr, size: u64) -> Result<(u64, u64), FrameError> {
        let count = self.frames_for(size)?;
        if !self.contains(addr, size) || !addr.is_aligned(self.granule) {
            return Err(FrameError::NotAllocated);
        }
        Ok((
            (addr.as_u64() - Self::BASE.as_u64()) >> self.granule_shift,
            count,
        ))
    }
}

impl FrameSource for PhysArena {
    fn granule(&self) -> u64 {
        self.granule
    }

    /// The whole arena: `[BASE, BASE + frames * granule)`.
    fn phys_range(&self) -> Option<core::ops::Range<PhysAddr>> {
        let base = Self::BASE.as_u64();
        Some(Self::BASE..PhysAddr::new(base + self.frames * self.granule))
    }

    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        let mut one = [PhysAddr::new(0)];
        self.alloc_many(size, align, &mut one)?;
        Ok(one[0])
    }

    /// One lock round trip for all of `out`.
    fn alloc_many(&self, size: u64, align: u64, out: &mut [PhysAddr]) -> Result<(), FrameError> {
        let count = self.frames_for(size)?;
        if !align.is_power_of_two() {
            return Err(FrameError::BadLayout);
        }
        let align_frames = (align >> self.granule_shift).max(1);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if count == 1 && align_frames == 1 {
            // Single frames (vmalloc's backing, page-table pages): take the
            // lowest free bits word by word, several from one word.
            self.take_single_frames(&mut st, out)?;
            self.count_in_use(&st, out.len() as u64, 0);
            return Ok(());
        }
        for i in 0..out.len() {
            let Some(start) = st.find_run(self.frames, count, align_frames) else {
                for f in &out[..i] {
                    let start = (f.as_u64() - Self::BASE.as_u64()) >> self.granule_shift;
                    // Just set above: cannot be refused.
                    let _ = st.release(start, count);
                }
                return Err(FrameError::OutOfFrames);
            };
            st.set_range(start, count, true);
            if start == st.hint {
                st.hint = start + count;
            }
            out[i] = PhysAddr::new(Self::BASE.as_u64() + (start << self.granule_shift));
        }
        self.count_in_use(&st, count * out.len() as u64, 0);
        Ok(())
    }

    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        let (start, count) = self.frame_span(addr, size)?;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.release(start, count)?;
        self.count_in_use(&st, 0, count);
        Ok(())
    }

    /// One lock round trip for the whole batch.
    fn free_many(&self, ranges: &[(PhysAddr, u64)], failed: &mut dyn FnMut(PhysAddr, FrameError)) {
        let mut freed = 0;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for &(addr, size) in ranges {
            match self
                .frame_span(addr, size)
                .and_then(|(start, count)| st.release(start, count).map(|()| count))
            {
                Ok(count) => freed += count,
                Err(e) => failed(addr, e),
            }
        }
        self.count_in_use(&st, 0, freed);
    }
}

impl PhysMap for PhysArena {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        debug_assert!(self.contains(addr, 1), "{addr:?} is outside the arena");
        let off = addr.as_u64().wrapping_sub(Self::BASE.as_u64()) as usize;
        self.host.as_ptr().wrapping_add(off)
    }

    /// `None` for any pointer outside the arena's host memory.
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        let off = (ptr as u64).wrapping_sub(self.host.as_ptr() as u64);
        (off < self.frames * self.granule).then(|| PhysAddr::new(Self::BASE.as_u64() + off))
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
    fn runs_across_words_and_single_frames_after_full_words() {
        let a = PhysArena::new(200 * K4, K4).unwrap();
        // Fill the first two words, then free a run that straddles them.
        let all: Vec<_> = (0..130).map(|_| a.alloc(K4, K4).unwrap()).collect();
        assert_eq!(all[129], PhysAddr::new(PhysArena::BASE.as_u64() + 129 * K4));
        for f in &all[60..70] {
            a.free(*f, K4).unwrap();
        }
        // An 8-frame run aligned to 8 frames does not fit in 60..70 (64..72
        // meets the busy 70): the first fit is past the busy frames, at 136.
        let run = a.alloc(8 * K4, 8 * K4).unwrap();
        assert_eq!(run, PhysAddr::new(PhysArena::BASE.as_u64() + 136 * K4));
        assert_eq!(a.alloc(K4, K4), Ok(all[60]), "lowest free frame first");
        assert_eq!(a.free(run, 9 * K4), Err(FrameError::NotAllocated));
        assert_eq!(a.frames_in_use(), 130 - 10 + 8 + 1);
        // The last frames of a partial last word are usable, none beyond.
        let rest: Vec<_> = core::iter::from_fn(|| a.alloc(K4, K4).ok()).collect();
        assert_eq!(a.frames_in_use(), 200);
        assert_eq!(
            rest.last(),
            Some(&PhysAddr::new(PhysArena::BASE.as_u64() + 199 * K4))
        );
    }

    #[test]
    fn alloc_many_takes_all_or_nothing() {
        let a = PhysArena::new(8 * K4, K4).unwrap();
        let mut three = [PhysAddr::new(0); 3];
        a.alloc_many(K4, K4, &mut three).unwrap();
        assert_eq!(three[2], PhysAddr::new(PhysArena::BASE.as_u64() + 2 * K4));
        assert_eq!(a.frames_in_use(), 3);
        let mut six = [PhysAddr::new(0); 6];
        assert_eq!(a.alloc_many(K4, K4, &mut six), Err(FrameError::OutOfFrames));
        assert_eq!(a.frames_in_use(), 3, "the five that fitted were given back");
        assert_eq!(
            a.alloc(K4, K4),
            Ok(PhysAddr::new(PhysArena::BASE.as_u64() + 3 * K4))
        );
        assert_eq!(a.alloc_many(100, K4, &mut six), Err(FrameError::BadLayout));
        a.alloc_many(K4, K4, &mut []).unwrap();
        assert_eq!(a.frames_in_use(), 4);
    }

    #[test]
    fn free_many_frees_what_it_can_and_reports_the_rest() {
        let a = PhysArena::new(16 * K4, K4).unwrap();
        let f: Vec<_> = (0..4).map(|_| a.alloc(K4, K4).unwrap()).collect();
        let two = a.alloc(2 * K4, K4).unwrap();
        let mut bad = Vec::new();
        a.free_many(
            &[
                (f[0], K4),
                (f[0], K4),
                (two, 2 * K4),
                (f[2], 100),
                (f[3], K4),
            ],
            &mut |addr, e| bad.push((addr, e)),
        );
        assert_eq!(
            bad,
            [
                (f[0], FrameError::NotAllocated),
                (f[2], FrameError::BadLayout)
            ]
        );
        // f[1] and f[2] remain.
        assert_eq!(a.frames_in_use(), 2);
        assert_eq!(a.alloc(K4, K4), Ok(f[0]));
    }

    /// The single-frame path hands out the lowest free frames, as the
    /// general search does, across word boundaries, holes below the hint,
    /// the arena's end and exhaustion (all or none).
    #[test]
    fn single_frames_are_the_lowest_free() {
        const N: usize = 150;
        let a = PhysArena::new(N as u64 * K4, K4).unwrap();
        let frame = |i: usize| PhysAddr::new(PhysArena::BASE.as_u64() + i as u64 * K4);
        let mut used = [false; N];
        for round in 0..60usize {
            let n = round * 7 % 13;
            let mut got = vec![PhysAddr::new(0); n];
            let want: Vec<_> = (0..N).filter(|&i| !used[i]).take(n).map(frame).collect();
            let r = a.alloc_many(K4, K4, &mut got);
            if want.len() < n {
                assert_eq!(r, Err(FrameError::OutOfFrames), "round {round}");
            } else {
                assert_eq!(r, Ok(()), "round {round}");
                assert_eq!(got, want, "round {round}");
                for f in got {
                    used[((f.as_u64() - PhysArena::BASE.as_u64()) / K4) as usize] = true;
                }
            }
            // Free every fifth used frame: holes below the hint.
            for (i, u) in used.iter_mut().enumerate() {
                if *u && (i + round) % 5 == 0 {
                    a.free(frame(i), K4).unwrap();
                    *u = false;
                }
            }
            assert_eq!(
                a.frames_in_use(),
                used.iter().filter(|u| **u).count() as u64
            );
        }
        let free = N - a.frames_in_use() as usize;
        let mut all = vec![PhysAddr::new(0); free + 1];
        assert_eq!(a.alloc_many(K4, K4, &mut all), Err(FrameError::OutOfFrames));
        assert_eq!(a.alloc_many(K4, K4, &mut all[..free]), Ok(()));
        assert_eq!(a.frames_in_use(), N as u64);
        assert_eq!(a.alloc(K4, K4), Err(FrameError::OutOfFrames));
    }

    #[test]
    fn bad_arena_sizes_are_errors() {
        assert!(PhysArena::new(K4, 1000).is_err());
        assert!(PhysArena::new(100, K4).is_err());
    }
}
