//! Huge mappings ([`VmFlags::HUGE`](crate::VmFlags::HUGE), Linux's
//! `vmalloc_huge` / `VM_ALLOW_HUGE_VMAP`): an area mapped with the
//! layout's large leaves where they fit, base pages for the head and tail.
//!
//! # The frame source contract
//!
//! A large leaf needs a physically contiguous run of its size, aligned to
//! its size: it is asked for with one [`FrameSource::alloc`]`(span, span)`
//! per large leaf (no new method: `alloc` already hands out contiguous,
//! aligned runs). A source that has none, or does not serve that size,
//! answers with any error; that span is then mapped with base pages from
//! [`FrameSource::alloc_many`] (counted in
//! [`VmallocStats::huge_fallbacks`](crate::VmallocStats::huge_fallbacks)),
//! so a huge request never fails for want of contiguous memory.
//!
//! A run comes back either whole, `free(run, span)` (the zap of a large
//! leaf hands it on as one unit, after the flush), or page by page,
//! `free(page, PAGE_SIZE)`: when a table other code linked stands where the
//! leaf would go (the walker frees only tables it made) the run is mapped
//! with base pages and its pages are freed one by one, as Linux's
//! `split_page` does with every huge vmalloc run. A source serving huge
//! requests accepts both (`PhysArena` does).
//!
//! # Tables left by earlier areas
//!
//! vmalloc never frees a last-level table on vfree (tables are pinned for
//! the unlocked leaf path), so a span that once held small areas still has
//! its empty table. Before a large leaf goes there the table is given back
//! ([`Walker::free_empty_table`](zap_walker::Walker::free_empty_table),
//! Linux's `pmd_free_pte_page`): unlinked, one page of the span flushed so
//! no CPU keeps a cached walk through it, then freed. The new area owns the
//! whole span, so no other caller can be inside that table.

use super::{DeferredFlush, Mapper};
use crate::backing::VmallocMem;
use crate::error::VmallocError;
use alloc::vec::Vec;
use arch_api::sync::RawMutex;
use arch_api::{FrameError, FrameSource, MapFlags, PageTableLayout, PhysAddr, PhysMap, VirtAddr};
use zap_walker::{Frames, Gather, Lent, MapHint, Unbounded};

/// The bytes of the large leaf huge areas use on layout `L`: an entry of
/// the level above the last (Linux's PMD: 2 MiB on x86_64 and aarch64 4K,
/// 32 MiB on 16K, 512 MiB on 64K), if the layout allows a leaf there.
pub(crate) fn large_leaf_size<L: PageTableLayout>() -> Option<u64> {
    (L::LEVELS >= 2 && L::leaf_allowed(L::LEVELS - 2)).then(|| L::entry_span(L::LEVELS - 2))
}

/// What a huge mapping got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HugeMapped {
    /// Large leaves mapped.
    pub(crate) large: u32,
    /// Large-leaf spans mapped with base pages (no contiguous run).
    pub(crate) fallbacks: u32,
}

/// A heap vector of `n` zeroed addresses, or `OutOfFrames`.
fn frame_list(n: usize) -> Result<Vec<PhysAddr>, VmallocError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| VmallocError::OutOfFrames(FrameError::OutOfFrames))?;
    v.resize(n, PhysAddr::new(0));
    Ok(v)
}

/// Returns runs and base frames a failed huge mapping took.
fn give_back<M: FrameSource + PhysMap + ?Sized>(
    mem: &VmallocMem<'_, M>,
    runs: &[Option<PhysAddr>],
    span: u64,
    base: &[PhysAddr],
    ps: u64,
) {
    for r in runs.iter().flatten() {
        // Taken from this source just now: cannot be refused.
        let _ = mem.free(*r, span);
    }
    mem.free_frames(base, ps);
}

impl<L, M, R> Mapper<'_, L, M, R>
where
    L: PageTableLayout,
    M: FrameSource + PhysMap + ?Sized,
    R: RawMutex,
{
    /// Takes frames for `pages` pages at `va` (a fresh area, one owner) and
    /// maps them `PAGE_KERNEL`: a large leaf of `span` bytes for every
    /// whole, aligned span that gets a contiguous run, base pages for the
    /// rest. All or nothing: on error every frame went back and nothing is
    /// mapped; if entries were visible for a while before the error undid
    /// them, `flush(start, end)` is called with their range before this
    /// returns (nobody was given the address, but an MMU may walk any
    /// mapping).
    pub(crate) fn map_new_huge(
        &self,
        va: VirtAddr,
        pages: u64,
        span: u64,
        flush: impl Fn(u64, u64),
    ) -> Result<HugeMapped, VmallocError> {
        let ps = L::PAGE_SIZE;
        let per_leaf = span / ps;
        let start = va.as_u64();
        let end = start + pages * ps;
        // [start, first): head; [first, last): whole spans; [last, end): tail.
        let first = start.next_multiple_of(span).min(end);
        let last = (end / span * span).max(first);
        let spans = ((last - first) / span) as usize;
        let mut runs: Vec<Option<PhysAddr>> = Vec::new();
        runs.try_reserve_exact(spans)
            .map_err(|_| VmallocError::OutOfFrames(FrameError::OutOfFrames))?;
        runs.extend((0..spans).map(|_| self.mem.alloc(span, span).ok()));
        let fallbacks = runs.iter().filter(|r| r.is_none()).count();
        let base_pages = pages - (spans - fallbacks) as u64 * per_leaf;
        let mut base = match frame_list(base_pages as usize) {
            Ok(v) => v,
            Err(e) => {
                give_back(self.mem, &runs, span, &[], ps);
                return Err(e);
            }
        };
        if let Err(e) = self.mem.alloc_many(ps, ps, &mut base) {
            give_back(self.mem, &runs, span, &[], ps);
            return Err(VmallocError::OutOfFrames(e));
        }
        #[cfg(feature = "debug")]
        {
            self.poison_frames(&base, 0xa5);
            for r in runs.iter().flatten() {
                // SAFETY: a run of `span` bytes just handed out by the frame
                // source, not mapped or shared yet; the direct map reaches it.
                unsafe { self.mem.phys_to_ptr(*r).write_bytes(0xa5, span as usize) };
            }
        }
        let flags = MapFlags::WRITE | MapFlags::GLOBAL;
        let mut pt = self.pt.lock();
        let (mut at, mut b, mut large) = (start, 0usize, 0u32);
        // The segments in address order: the head, each span, the tail.
        let head = ((first - start) / ps) as usize;
        let tail = ((end - last) / ps) as usize;
        let mut segs = core::iter::once((head, None))
            .chain(runs.iter().map(|r| (per_leaf as usize, Some(*r))))
            .chain(core::iter::once((tail, None)));
        let r = segs.try_for_each(|(n, run)| {
            if n == 0 {
                return Ok(());
            }
            let at_va = VirtAddr::new(at);
            match run {
                Some(Some(run)) => {
                    let frames = Frames::Contiguous {
                        start: run,
                        pages: per_leaf,
                    };
                    // An empty table an earlier area left gives way.
                    pt.free_empty_table(at_va, L::LEVELS - 1, |s, e| {
                        flush(s.as_u64(), e.as_u64())
                    })?;
                    pt.map_range_with(at_va, frames, flags, MapHint::LargeLeaves)?;
                    // Under a table other code linked the walker mapped
                    // base pages: count what it did.
                    if pt.translate(at_va).is_some_and(|t| t.size == span) {
                        large += 1;
                    }
                }
                _ => {
                    pt.map_range(at_va, Frames::List(&base[b..b + n]), flags)?;
                    b += n;
                }
            }
            at += n as u64 * ps;
            Ok(())
        });
        if let Err(e) = r {
            if at > start {
                // Undo what was mapped; the frames are given back below.
                let mut g: Gather<DeferredFlush, 64, Lent> = Gather::with_sink(DeferredFlush, Lent);
                let _ = pt.zap_range(va, VirtAddr::new(at), &mut Unbounded::new(ps), &mut g);
            }
            drop(pt);
            if at > start {
                flush(start, at);
            }
            give_back(self.mem, &runs, span, &base, ps);
            return Err(VmallocError::Map(e));
        }
        Ok(HugeMapped {
            large,
            fallbacks: fallbacks as u32,
        })
    }
}
