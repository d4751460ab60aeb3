//! The records both fronts keep: what an area is ([`AreaInfo`]), the
//! configuration, and the counters ([`VmallocStats`], [`PurgeReport`]).

use crate::flags::VmFlags;
use arch_api::{TlbFlush, VirtAddr};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What made an area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AreaKind {
    /// `vmalloc`: frames owned by the allocator.
    Vmalloc,
    /// `vmap`: frames owned by the caller.
    Vmap,
    /// A per-CPU vmap block (`vm_map_ram`).
    VmapBlock,
}

impl AreaKind {
    /// The name vmallocinfo prints.
    pub const fn name(self) -> &'static str {
        match self {
            AreaKind::Vmalloc => "vmalloc",
            AreaKind::Vmap => "vmap",
            AreaKind::VmapBlock => "vm_map_ram",
        }
    }
}

/// Where an area is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AreaState {
    /// Mapped and in use.
    Live,
    /// Freed, unmapped, waiting for a purge (range still reserved).
    Lazy,
}

/// One area, as vmallocinfo lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AreaInfo {
    /// First byte.
    pub start: VirtAddr,
    /// One past the last byte.
    pub end: VirtAddr,
    /// Pages of the area.
    pub pages: u64,
    /// Who allocated it.
    pub caller: &'static str,
    /// What made it.
    pub kind: AreaKind,
    /// Live or lazily freed.
    pub state: AreaState,
    /// Its guard layout ([`VmFlags::NO_GUARD`], [`VmFlags::GUARD_BEFORE`]).
    pub flags: VmFlags,
    /// Reserved, unmapped pages between the mapped part and the guard
    /// after it: what a shrinking `vrealloc` unmapped (a growing one maps
    /// them again). They fault like the guard.
    pub spare: u32,
    /// Large leaves mapping part of the area ([`VmFlags::HUGE`]); the rest
    /// is base pages.
    pub large_leaves: u32,
    /// log2 of a large leaf's bytes (0 when `large_leaves` is 0).
    pub large_shift: u8,
}

impl AreaInfo {
    /// The page size the area was made with.
    const fn page(&self) -> u64 {
        (self.end.as_u64() - self.start.as_u64()) / self.pages
    }

    /// The address space the area holds, guard pages included: what its
    /// front reserved, and what vmallocinfo prints.
    pub const fn reserved(&self) -> (VirtAddr, VirtAddr) {
        let ps = self.page();
        (
            VirtAddr::new(self.start.as_u64() - self.flags.guard_pages_before() * ps),
            VirtAddr::new(
                self.end.as_u64() + (self.spare as u64 + self.flags.guard_pages_after()) * ps,
            ),
        )
    }

    /// The leaves mapping the area, by size: `(large leaf bytes, count)`
    /// (`(0, 0)` without large leaves) and `(page bytes, count)`.
    pub const fn leaves(&self) -> ((u64, u64), (u64, u64)) {
        let ps = self.page();
        if self.large_leaves == 0 {
            return ((0, 0), (ps, self.pages));
        }
        let large = 1u64 << self.large_shift;
        let n = self.large_leaves as u64;
        ((large, n), (ps, self.pages - n * (large / ps)))
    }

    /// Whether `va` lies on one of the area's guard pages.
    pub fn is_guard(&self, va: VirtAddr) -> bool {
        let (s, e) = self.reserved();
        s <= va && va < e && !(self.start <= va && va < self.end)
    }
}

/// Counters, as the harness and vmallocinfo report them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmallocStats {
    /// Areas allocated (`vmalloc` + `vmap`).
    pub allocs: u64,
    /// Areas freed (`vfree` + `vunmap`).
    pub frees: u64,
    /// Purges that found lazy areas.
    pub purges: u64,
    /// TLB flush events issued by purges (one per purge).
    pub flush_events: u64,
    /// Pages of the union ranges those flushes covered.
    pub pages_flushed: u64,
    /// Simulated shootdown IPIs (`cpus - 1` per flush).
    pub ipis: u64,
    /// Lazy areas released by purges.
    pub areas_purged: u64,
    /// Lazily freed pages now (`vmap_lazy_nr`).
    pub lazy_pages: u64,
    /// Tree nodes visited by allocation searches, in total.
    pub nodes_visited: u64,
    /// The most nodes one allocation search visited.
    pub nodes_visited_max: u32,
    /// Allocations that failed once and were retried after a purge.
    pub retries: u64,
    /// Times the lazy counter was driven below zero (0 unless broken).
    pub lazy_underflows: u64,
    /// Large leaves mapping live areas now ([`VmFlags::HUGE`]).
    pub huge_leaves: u64,
    /// Large leaves mapped since creation.
    pub huge_leaves_mapped: u64,
    /// Large-leaf spans of huge requests mapped with base pages instead:
    /// the frame source had no contiguous aligned run.
    pub huge_fallbacks: u64,
    /// Page-table bytes the live large leaves save: one last-level table
    /// each, which base pages of the same span would need.
    pub pagetable_bytes_saved: u64,
}

/// What one purge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Lazy areas released.
    pub areas: u64,
    /// Their pages.
    pub pages: u64,
    /// The union range flushed, `[start, end)` (empty when nothing was lazy).
    pub start: u64,
    /// End of the union range.
    pub end: u64,
}

/// The live counters behind [`VmallocStats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) allocs: AtomicU64,
    pub(crate) frees: AtomicU64,
    pub(crate) purges: AtomicU64,
    pub(crate) flush_events: AtomicU64,
    pub(crate) pages_flushed: AtomicU64,
    pub(crate) areas_purged: AtomicU64,
    pub(crate) nodes_visited: AtomicU64,
    pub(crate) nodes_visited_max: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) huge_live: AtomicU64,
    pub(crate) huge_mapped: AtomicU64,
    pub(crate) huge_fallbacks: AtomicU64,
}

impl Counters {
    /// Flushes `[start, end)` through `tlb` and counts the flush event and
    /// its pages: every flush vmalloc issues goes through here.
    pub(crate) fn flush<T: TlbFlush + ?Sized>(&self, tlb: &T, start: u64, end: u64, ps: u64) {
        tlb.flush_range(VirtAddr::new(start), VirtAddr::new(end), ps);
        self.flush_events.fetch_add(1, Relaxed);
        self.pages_flushed
            .fetch_add((end - start).div_ceil(ps), Relaxed);
    }

    /// Records one allocation search.
    pub(crate) fn searched(&self, visited: u32) {
        self.nodes_visited.fetch_add(u64::from(visited), Relaxed);
        self.nodes_visited_max
            .fetch_max(u64::from(visited), Relaxed);
    }

    /// A snapshot; `cpus` gives the IPIs per flush, the rest comes from the
    /// lazy accounting.
    pub(crate) fn snapshot(
        &self,
        cpus: u32,
        lazy_pages: u64,
        lazy_underflows: u64,
    ) -> VmallocStats {
        let flush_events = self.flush_events.load(Relaxed);
        VmallocStats {
            allocs: self.allocs.load(Relaxed),
            frees: self.frees.load(Relaxed),
            purges: self.purges.load(Relaxed),
            flush_events,
            pages_flushed: self.pages_flushed.load(Relaxed),
            ipis: flush_events * u64::from(cpus.saturating_sub(1)),
            areas_purged: self.areas_purged.load(Relaxed),
            lazy_pages,
            nodes_visited: self.nodes_visited.load(Relaxed),
            nodes_visited_max: self.nodes_visited_max.load(Relaxed) as u32,
            retries: self.retries.load(Relaxed),
            lazy_underflows,
            huge_leaves: self.huge_live.load(Relaxed),
            huge_leaves_mapped: self.huge_mapped.load(Relaxed),
            huge_fallbacks: self.huge_fallbacks.load(Relaxed),
            pagetable_bytes_saved: 0,
        }
    }
}
