//! Per-node caches of backing frames in front of the frame source, as
//! Linux's per-CPU page lists (`pcp`) sit in front of the buddy allocator.
//!
//! Why: a small `vmalloc` / `vfree` pair on the sharded front otherwise takes
//! the frame source's lock twice and bumps [`VmallocMem`]'s shared byte
//! count twice; with two CPUs working, each of those writes moves a cache
//! line between them. A node's cache is used by the CPU(s) of that node, so
//! its lock and its frames stay local; the source is reached once per
//! [`CACHE_BATCH`] frames.
//!
//! Cached frames are counted as out by [`VmallocMem`] (they were handed out
//! by it and not returned). The purge drains every cache, so after a purge
//! `bytes_out` again counts only the frames of live areas and the page
//! tables, as the leak checks expect; a shortage drains them too, through
//! the purge the retry runs first.
//!
//! Frames enter and leave a cache outside the page-table lock; they go back
//! to the source with [`VmallocMem::free_frames`].

use crate::backing::VmallocMem;
use arch_api::sync::{Mutex, RawMutex};
use arch_api::{FrameError, FrameSource, PhysAddr, PhysMap};

/// Frames one cache holds at most.
pub(crate) const CACHE_CAP: usize = 64;
/// Frames taken from the source at once when a cache runs dry, and kept
/// when a full cache spills to the source.
pub(crate) const CACHE_BATCH: usize = 32;

/// One node's cache of frames of the layout's page size. Aligned to two
/// cache lines so that two nodes' caches never share one (the adjacent-line
/// prefetcher pairs lines).
#[repr(align(128))]
pub(crate) struct FrameCache<R: RawMutex> {
    mag: Mutex<R, Magazine>,
}

/// The frames of one cache.
struct Magazine {
    frames: [PhysAddr; CACHE_CAP],
    n: usize,
}

impl<R: RawMutex> FrameCache<R> {
    /// An empty cache.
    pub(crate) fn new() -> Self {
        Self {
            mag: Mutex::new(Magazine {
                frames: [PhysAddr::new(0); CACHE_CAP],
                n: 0,
            }),
        }
    }

    /// Fills `out` (at most [`CACHE_CAP`] frames) with frames of `size`
    /// bytes, refilling from `mem` when the cache runs short. All or none:
    /// on error the cache and `out` hold what they held before.
    pub(crate) fn take<M: FrameSource + PhysMap + ?Sized>(
        &self,
        mem: &VmallocMem<'_, M>,
        size: u64,
        out: &mut [PhysAddr],
    ) -> Result<(), FrameError> {
        let mut m = self.mag.lock();
        Self::take_from(&mut m, mem, size, out)
    }

    /// [`take`](Self::take) if the cache's lock is free (`None` if not,
    /// nothing taken): a `NOWAIT` request's frames. A refill calls the
    /// frame source once, which must not sleep (see
    /// [`VmFlags::NOWAIT`](crate::VmFlags::NOWAIT)).
    pub(crate) fn try_take<M: FrameSource + PhysMap + ?Sized>(
        &self,
        mem: &VmallocMem<'_, M>,
        size: u64,
        out: &mut [PhysAddr],
    ) -> Option<Result<(), FrameError>> {
        let mut m = self.mag.try_lock()?;
        Some(Self::take_from(&mut m, mem, size, out))
    }

    fn take_from<M: FrameSource + PhysMap + ?Sized>(
        m: &mut Magazine,
        mem: &VmallocMem<'_, M>,
        size: u64,
        out: &mut [PhysAddr],
    ) -> Result<(), FrameError> {
        let want = out.len();
        debug_assert!(want <= CACHE_CAP);
        if m.n < want {
            // Refill to a batch beyond what is wanted; if the source cannot
            // give that much, ask for just the shortfall.
            let n = m.n;
            let refill = (want - n).max(CACHE_BATCH).min(CACHE_CAP - n);
            if mem
                .alloc_many(size, size, &mut m.frames[n..n + refill])
                .is_ok()
            {
                m.n += refill;
            } else {
                mem.alloc_many(size, size, &mut m.frames[n..want])?;
                m.n = want;
            }
        }
        let n = m.n;
        out.copy_from_slice(&m.frames[n - want..n]);
        m.n -= want;
        Ok(())
    }

    /// Takes back frames of `size` bytes that are no longer mapped; when the
    /// cache overflows, all but [`CACHE_BATCH`] go back to `mem`.
    pub(crate) fn put<M: FrameSource + PhysMap + ?Sized>(
        &self,
        mem: &VmallocMem<'_, M>,
        size: u64,
        frames: &[PhysAddr],
    ) {
        let mut m = self.mag.lock();
        for &f in frames {
            if m.n == CACHE_CAP {
                let keep = CACHE_BATCH;
                mem.free_frames(&m.frames[keep..], size);
                m.n = keep;
            }
            let n = m.n;
            m.frames[n] = f;
            m.n += 1;
        }
    }

    /// Returns every cached frame to `mem`.
    pub(crate) fn drain<M: FrameSource + PhysMap + ?Sized>(
        &self,
        mem: &VmallocMem<'_, M>,
        size: u64,
    ) {
        let mut m = self.mag.lock();
        let n = m.n;
        if n != 0 {
            mem.free_frames(&m.frames[..n], size);
            m.n = 0;
        }
    }
}
