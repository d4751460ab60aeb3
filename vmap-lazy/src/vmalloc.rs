//! `Vmalloc`: `vmalloc` / `vfree` / `vmap` / `vunmap` and
//! `purge_vmap_area_lazy` over a vmap-core space, a zap-walker page table and
//! the OS's frames.
//!
//! * `vmalloc(size)`: reserve a range (vmap-core), take one frame per page,
//!   map them (zap-walker). Any failure unwinds all of it; a shortage of
//!   virtual space or frames purges the lazy areas and retries once.
//! * `vfree(addr)`: one search of the area table finds and marks the area;
//!   its page-table entries are cleared at once WITHOUT a TLB flush, its
//!   frames go back to the OS, and its range stays reserved on a lazy list
//!   (`vmap_lazy_nr` counts the pages). The [`PurgePolicy`] decides when to
//!   purge.
//! * `purge_vmap_area_lazy()`: take every lazy area, flush the TLB ONCE for
//!   the union of their ranges, and only then release the ranges to vmap-core.
//!
//! Locks: `kva` (the space and the area table, Linux's `vmap_area_lock`),
//! `pt` (the page table, `init_mm`'s lock) and the lazy lists; never two at
//! once.

use crate::area::{
    AreaInfo, AreaKind, AreaState, Counters, PurgeReport, VmallocConfig, VmallocStats,
};
use crate::area_table::AreaTable;
use crate::backing::VmallocMem;
use crate::checker::{AllocCheck, NoCheck};
use crate::error::VmallocError;
use crate::lazy::{LazyAccount, LazyRange};
use crate::mapper::{Mapper, is_shortage, pages_for};
use crate::purge::{LazyMaxPages, PurgeCtx, PurgePolicy, release_before_flush};
use crate::vmap_block::{VMAP_BBMAP_BITS, VMAP_MAX_ALLOC, VmapBlocks};
use alloc::vec::Vec;
use arch_api::sync::{DefaultRawMutex, Mutex, RawMutex};
use arch_api::{FrameSource, MapFlags, PageTableLayout, PhysAddr, PhysMap, TlbFlush, VirtAddr};
use core::sync::atomic::Ordering::Relaxed;
use vmap_core::{Augmented, FreeAreaSearch, VecSource, VmapError, VmapSpace};
#[cfg(feature = "testing")]
use zap_walker::Translation;

/// The busy space and the table of areas (`vmap_area_lock`'s data).
struct Kva<F: FreeAreaSearch> {
    space: VmapSpace<F, VecSource>,
    areas: AreaTable,
}

/// vmalloc over layout `L`, the OS's memory `M`, the TLB flusher `T`, purge
/// policy `P`, free-area search `F`, allocation check `C` and raw lock `R`.
pub struct Vmalloc<
    'm,
    L: PageTableLayout,
    M: FrameSource + PhysMap + ?Sized,
    T: TlbFlush,
    P: PurgePolicy = LazyMaxPages,
    F: FreeAreaSearch = Augmented,
    C: AllocCheck = NoCheck,
    R: RawMutex = DefaultRawMutex,
> {
    map: Mapper<'m, L, M, R>,
    kva: Mutex<R, Kva<F>>,
    lazy: LazyAccount<R>,
    blocks: VmapBlocks<R>,
    tlb: T,
    policy: P,
    check: C,
    cfg: VmallocConfig,
    counters: Counters,
}

impl<'m, L, M, T, P, F, C, R> Vmalloc<'m, L, M, T, P, F, C, R>
where
    L: PageTableLayout,
    M: FrameSource + PhysMap + ?Sized,
    T: TlbFlush,
    P: PurgePolicy,
    F: FreeAreaSearch,
    C: AllocCheck,
    R: RawMutex,
{
    /// vmalloc over `[cfg.vstart, cfg.vend)`, with frames and page tables
    /// from `mem`, purges flushed through `tlb`, in page tables of its own
    /// (fresh roots, [`page_table_roots`](Self::page_table_roots)).
    pub fn new(
        mem: &'m VmallocMem<'m, M>,
        tlb: T,
        policy: P,
        check: C,
        cfg: VmallocConfig,
    ) -> Result<Self, VmallocError> {
        Self::over(Mapper::new(mem)?, tlb, policy, check, cfg)
    }

    /// vmalloc over `[cfg.vstart, cfg.vend)` of the kernel's own page table
    /// at `root` (what CR3 / TTBR1_EL1 holds), however the kernel built it:
    /// areas are mapped into that table, nothing has to be copied or loaded.
    /// The tables it adds in the window stay (kernel page tables are never
    /// freed); dropping the vmalloc leaves the table to the kernel.
    ///
    /// # Safety
    ///
    /// `root` is a live page table of layout `L` whose tables `mem`'s
    /// [`PhysMap`] reaches, and while this vmalloc lives nothing else writes
    /// entries inside the window (the contract of zap-walker's
    /// `Walker::attach`).
    pub unsafe fn attach(
        mem: &'m VmallocMem<'m, M>,
        root: PhysAddr,
        tlb: T,
        policy: P,
        check: C,
        cfg: VmallocConfig,
    ) -> Result<Self, VmallocError> {
        // SAFETY: forwarded to the caller.
        let map = unsafe { Mapper::attach(mem, root, cfg.vstart..cfg.vend)? };
        Self::over(map, tlb, policy, check, cfg)
    }

    fn over(
        map: Mapper<'m, L, M, R>,
        tlb: T,
        policy: P,
        check: C,
        cfg: VmallocConfig,
    ) -> Result<Self, VmallocError> {
        let space = VmapSpace::new(cfg.vstart, cfg.vend, L::PAGE_SIZE, VecSource::new())
            .map_err(VmallocError::Setup)?;
        Ok(Self {
            map,
            kva: Mutex::new(Kva {
                space,
                areas: AreaTable::new(),
            }),
            lazy: LazyAccount::new(1),
            blocks: VmapBlocks::new(cfg.cpus as usize),
            tlb,
            policy,
            check,
            cfg,
            counters: Counters::default(),
        })
    }

    /// The page size.
    pub const fn page_size(&self) -> u64 {
        L::PAGE_SIZE
    }

    /// The configuration.
    pub fn config(&self) -> VmallocConfig {
        self.cfg
    }

    /// The allocation check.
    pub fn checker(&self) -> &C {
        &self.check
    }

    /// The TLB flusher purges use.
    pub fn tlb(&self) -> &T {
        &self.tlb
    }

    /// The memory adapter.
    pub fn mem(&self) -> &'m VmallocMem<'m, M> {
        self.map.mem
    }

    /// `vmap_lazy_nr`: lazily freed pages not yet purged.
    pub fn vmap_lazy_nr(&self) -> u64 {
        self.lazy.nr()
    }

    fn ctx(&self) -> PurgeCtx {
        PurgeCtx {
            lazy_pages: self.lazy.nr(),
            cpus: self.cfg.cpus,
            page_size: L::PAGE_SIZE,
        }
    }

    /// `vmalloc(size)`: `size` bytes (rounded up to pages) of mapped memory.
    pub fn vmalloc(&self, size: u64) -> Result<VirtAddr, VmallocError> {
        self.vmalloc_caller(size, "vmalloc")
    }

    /// `__vmalloc_node(…, caller)`: as [`vmalloc`](Self::vmalloc), recording
    /// `caller` for vmallocinfo.
    pub fn vmalloc_caller(
        &self,
        size: u64,
        caller: &'static str,
    ) -> Result<VirtAddr, VmallocError> {
        let pages = pages_for(size, L::PAGE_SIZE)?;
        self.with_retry(|| self.try_vmalloc(pages, caller))
    }

    /// Runs `f`; on a shortage of space or frames purges and runs it once more.
    fn with_retry(
        &self,
        f: impl Fn() -> Result<VirtAddr, VmallocError>,
    ) -> Result<VirtAddr, VmallocError> {
        match f() {
            Err(e) if is_shortage(&e) => {
                self.counters.retries.fetch_add(1, Relaxed);
                self.purge_vmap_area_lazy();
                f()
            }
            r => r,
        }
    }

    /// Reserves `pages` pages of virtual space; runs the allocation check.
    fn reserve(&self, pages: u64) -> Result<VirtAddr, VmallocError> {
        self.reserve_aligned(pages, L::PAGE_SIZE)
    }

    /// Reserves `pages` pages aligned to `align` bytes.
    fn reserve_aligned(&self, pages: u64, align: u64) -> Result<VirtAddr, VmallocError> {
        let (va, visited) = {
            let mut kva = self.kva.lock();
            let a = kva
                .space
                .alloc(pages * L::PAGE_SIZE, align, self.cfg.vstart, self.cfg.vend)
                .map_err(|e| match e {
                    VmapError::NoSpace { .. } | VmapError::NodePoolExhausted => {
                        VmallocError::NoVirtualSpace(e)
                    }
                    VmapError::Overflow { size, .. } => VmallocError::Overflow { size },
                    e => VmallocError::NoVirtualSpace(e),
                });
            let visited = kva.space.stats().last_nodes_visited;
            (a, visited)
        };
        self.counters.searched(visited);
        let va = va?.va_start;
        self.check
            .on_alloc(va, VirtAddr::new(va.as_u64() + pages * L::PAGE_SIZE));
        if self.policy.after_alloc(visited, &self.ctx()) {
            self.purge_vmap_area_lazy();
        }
        Ok(va)
    }

    /// Gives back a reservation nothing was mapped in (no flush needed).
    fn unreserve(&self, va: VirtAddr) {
        // Cannot fail: the range was reserved by this call and not published.
        let _ = self.kva.lock().space.find_unlink(va);
    }

    fn try_vmalloc(&self, pages: u64, caller: &'static str) -> Result<VirtAddr, VmallocError> {
        let va = self.reserve(pages)?;
        if let Err(e) = self.map.map_new(va, pages) {
            self.unreserve(va);
            return Err(e);
        }
        self.tlb.sync_new_entries();
        self.publish(va, pages, caller, AreaKind::Vmalloc);
        Ok(va)
    }

    fn publish(&self, va: VirtAddr, pages: u64, caller: &'static str, kind: AreaKind) {
        let info = AreaInfo {
            start: va,
            end: VirtAddr::new(va.as_u64() + pages * L::PAGE_SIZE),
            pages,
            caller,
            kind,
            state: AreaState::Live,
        };
        self.kva.lock().areas.insert(info);
        self.counters.allocs.fetch_add(1, Relaxed);
    }

    /// `vmap(frames, flags)`: maps the caller's frames (one per page)
    /// contiguously; they stay the caller's (`vunmap` does not free them).
    pub fn vmap(&self, frames: &[PhysAddr], flags: MapFlags) -> Result<VirtAddr, VmallocError> {
        if frames.is_empty() {
            return Err(VmallocError::ZeroSize);
        }
        if let Some(f) = frames.iter().find(|f| !f.is_aligned(L::PAGE_SIZE)) {
            return Err(VmallocError::UnalignedFrame { frame: f.as_u64() });
        }
        let pages = frames.len() as u64;
        pages_for(pages.saturating_mul(L::PAGE_SIZE), L::PAGE_SIZE)?;
        self.with_retry(|| {
            let va = self.reserve(pages)?;
            if let Err(e) = self.map.map_frames(va, frames, flags) {
                self.unreserve(va);
                return Err(e);
            }
            self.tlb.sync_new_entries();
            self.publish(va, pages, "vmap", AreaKind::Vmap);
            Ok(va)
        })
    }

    /// `vfree(addr)`: unmaps the area at `addr` without a TLB flush, returns
    /// its frames and keeps its range reserved until a purge. A null `addr`
    /// is a no-op; anything but the start of a live `vmalloc` area is an
    /// error that changes nothing.
    pub fn vfree(&self, addr: VirtAddr) -> Result<(), VmallocError> {
        if addr.as_u64() == 0 {
            return Ok(());
        }
        self.free_area(addr, AreaKind::Vmalloc)
    }

    /// `vunmap(addr)`: as [`vfree`](Self::vfree) for a `vmap` area; the
    /// frames stay the caller's.
    pub fn vunmap(&self, addr: VirtAddr) -> Result<(), VmallocError> {
        if addr.as_u64() == 0 {
            return Ok(());
        }
        self.free_area(addr, AreaKind::Vmap)
    }

    fn free_area(&self, addr: VirtAddr, kind: AreaKind) -> Result<(), VmallocError> {
        let release_now = release_before_flush(&self.policy);
        // One search of the area table finds the area and marks it lazy.
        let info = {
            let mut kva = self.kva.lock();
            let not_found = VmallocError::NotFound {
                addr: addr.as_u64(),
            };
            let info = match kva.areas.get_mut(addr.as_u64()) {
                Some(i) if i.state == AreaState::Live => i,
                _ => return Err(not_found),
            };
            if info.kind != kind {
                return Err(VmallocError::WrongKind {
                    addr: addr.as_u64(),
                    kind: info.kind.name(),
                });
            }
            info.state = AreaState::Lazy;
            let copy = *info;
            if release_now {
                // The deliberately broken order: the range is free again
                // before any flush (only test policies ask for this).
                kva.areas.remove(addr.as_u64());
                let _ = kva.space.find_unlink(addr);
            }
            copy
        };
        let unmapped = self
            .map
            .unmap_noflush(info.start, info.end, kind == AreaKind::Vmap);
        self.lazy.add(
            0,
            LazyRange {
                start: info.start.as_u64(),
                end: info.end.as_u64(),
                pages: info.pages,
                released: release_now,
            },
        );
        self.counters.frees.fetch_add(1, Relaxed);
        if self.policy.after_free(&self.ctx()) {
            self.purge_vmap_area_lazy();
        }
        unmapped
    }

    /// `purge_vmap_area_lazy()`: flushes the TLB once for the union of every
    /// lazy area's range, then releases the ranges for reuse.
    pub fn purge_vmap_area_lazy(&self) -> PurgeReport {
        self.purge_with(None)
    }

    /// One flush covering the lazy areas and `extra` (vmap-block dirty
    /// ranges), then the lazy ranges are released.
    fn purge_with(&self, extra: Option<(u64, u64)>) -> PurgeReport {
        let batch = self.lazy.take();
        let lazy_span = batch.as_ref().map(|b| (b.start, b.end));
        let (start, end) = match (lazy_span, extra) {
            (None, None) => return PurgeReport::default(),
            (Some(a), None) | (None, Some(a)) => a,
            (Some((s1, e1)), Some((s2, e2))) => (s1.min(s2), e1.max(e2)),
        };
        let ps = L::PAGE_SIZE;
        self.counters.flush(&self.tlb, start, end, ps);
        let Some(batch) = batch else {
            return PurgeReport {
                start,
                end,
                ..PurgeReport::default()
            };
        };
        {
            let mut kva = self.kva.lock();
            let kva = &mut *kva;
            let (areas, space) = (&mut kva.areas, &mut kva.space);
            let live = batch.ranges.iter().filter(|r| !r.released);
            // Cannot fail: a lazy area's range stays reserved until here.
            space.find_unlink_batch(
                live.map(|r| {
                    areas.remove(r.start);
                    VirtAddr::new(r.start)
                }),
                |_, _| {},
            );
        }
        self.lazy.retire(batch.pages);
        self.counters.purges.fetch_add(1, Relaxed);
        self.counters
            .areas_purged
            .fetch_add(batch.ranges.len() as u64, Relaxed);
        PurgeReport {
            areas: batch.ranges.len() as u64,
            pages: batch.pages,
            start,
            end,
        }
    }

    /// Same as [`purge_vmap_area_lazy`](Self::purge_vmap_area_lazy).
    pub fn purge(&self) -> PurgeReport {
        self.purge_vmap_area_lazy()
    }

    /// `vm_unmap_aliases()`: one flush covering every lazy area and every
    /// CPU's vmap-block dirty range; then the lazy ranges are released and
    /// the dirty block pages become reusable.
    pub fn vm_unmap_aliases(&self) -> PurgeReport {
        let mut union: Option<(u64, u64)> = None;
        let mut snaps = Vec::new();
        for (c, m) in self.blocks.cpus.iter().enumerate() {
            let (u, snap) = m.lock().dirty(L::PAGE_SIZE);
            if let Some((s, e)) = u {
                union = Some(union.map_or((s, e), |(us, ue)| (us.min(s), ue.max(e))));
                snaps.push((c, snap));
            }
        }
        let r = self.purge_with(union);
        for (c, snap) in snaps {
            self.blocks.cpus[c].lock().flushed(&snap);
        }
        r
    }

    /// `vm_map_ram(frames)` on CPU `cpu`: up to [`VMAP_MAX_ALLOC`] pages are
    /// carved from the CPU's vmap block (no shared-tree search); larger
    /// requests are a plain [`vmap`](Self::vmap). The frames stay the caller's.
    pub fn vm_map_ram(
        &self,
        cpu: usize,
        frames: &[PhysAddr],
        flags: MapFlags,
    ) -> Result<VirtAddr, VmallocError> {
        let n = frames.len() as u64;
        if n == 0 {
            return Err(VmallocError::ZeroSize);
        }
        if n > VMAP_MAX_ALLOC {
            return self.vmap(frames, flags);
        }
        if let Some(f) = frames.iter().find(|f| !f.is_aligned(L::PAGE_SIZE)) {
            return Err(VmallocError::UnalignedFrame { frame: f.as_u64() });
        }
        let ps = L::PAGE_SIZE;
        self.blocks.map_ram(
            cpu,
            n,
            ps,
            |s, e| self.counters.flush(&self.tlb, s, e, ps),
            || {
                self.with_retry(|| {
                    let va = self.reserve_aligned(VMAP_BBMAP_BITS, VMAP_BBMAP_BITS * ps)?;
                    self.publish(va, VMAP_BBMAP_BITS, "vmap_block", AreaKind::VmapBlock);
                    Ok(va)
                })
                .map(|va| va.as_u64())
            },
            |va| {
                self.check.on_alloc(va, VirtAddr::new(va.as_u64() + n * ps));
                self.map.map_frames(va, frames, flags)?;
                self.tlb.sync_new_entries();
                Ok(())
            },
        )
    }

    /// `vm_unmap_ram(addr, count)`: undoes a [`vm_map_ram`](Self::vm_map_ram)
    /// of `count` pages. The entries are cleared without a flush; the pages
    /// are reused once a flush covered them. Anything but a live mapping:
    /// [`VmallocError::NotFound`], nothing changed.
    pub fn vm_unmap_ram(&self, addr: VirtAddr, count: u64) -> Result<(), VmallocError> {
        if count > VMAP_MAX_ALLOC {
            return self.vunmap(addr);
        }
        let (r, retire) = self
            .blocks
            .unmap_ram(addr, count, L::PAGE_SIZE, |start, end| {
                self.map.unmap_noflush(start, end, true)
            });
        if let Some(block) = retire {
            self.retire_block(block);
        }
        r
    }

    /// A block with every page dirty goes on the lazy list as a whole.
    fn retire_block(&self, start: u64) {
        let pages = VMAP_BBMAP_BITS;
        if let Some(info) = self.kva.lock().areas.get_mut(start) {
            info.state = AreaState::Lazy;
        }
        self.lazy.add(
            0,
            LazyRange {
                start,
                end: start + pages * L::PAGE_SIZE,
                pages,
                released: false,
            },
        );
        self.counters.frees.fetch_add(1, Relaxed);
        if self.policy.after_free(&self.ctx()) {
            self.purge_vmap_area_lazy();
        }
    }

    /// Pages unmapped from vmap blocks and not yet flushed.
    pub fn vmap_block_dirty_pages(&self) -> u64 {
        self.blocks
            .cpus
            .iter()
            .map(|m| m.lock().dirty_pages())
            .sum()
    }

    /// The software MMU: what `va` translates to now (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn translate(&self, va: VirtAddr) -> Option<Translation> {
        self.map.translate(va)
    }

    /// Writes `byte` at `va` through the page table (the software MMU);
    /// [`VmallocError::NotFound`] if `va` is not mapped writable (feature
    /// `testing`).
    #[cfg(feature = "testing")]
    pub fn write_byte(&self, va: VirtAddr, byte: u8) -> Result<(), VmallocError> {
        self.map.write_byte(va, byte)
    }

    /// Reads the byte at `va` through the page table (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn read_byte(&self, va: VirtAddr) -> Result<u8, VmallocError> {
        self.map.read_byte(va)
    }

    /// Every area (live and lazy) in address order (vmallocinfo).
    pub fn areas(&self) -> Vec<AreaInfo> {
        self.kva.lock().areas.sorted()
    }

    /// The counters now.
    pub fn stats(&self) -> VmallocStats {
        self.counters
            .snapshot(self.cfg.cpus, self.lazy.nr(), self.lazy.underflows())
    }

    /// `vmalloc_to_page`: the physical address `va` maps to now (offset
    /// within the page included), or `None` if nothing maps it. A kernel
    /// reads an area's frames with it (to build a scatter list, to reach a
    /// page through its direct map).
    pub fn vmalloc_to_phys(&self, va: VirtAddr) -> Option<PhysAddr> {
        self.map.translate(va).map(|t| t.phys)
    }

    /// Page-table bytes held (never freed: kernel tables persist).
    pub fn pagetable_bytes(&self) -> u64 {
        self.map.pagetable_bytes()
    }

    /// The root table(s) of vmalloc's page table and how many of the two
    /// slots are used: one, or two on layouts whose halves have separate
    /// roots (aarch64's TTBR0/TTBR1). A kernel whose vmalloc window lives in
    /// these tables makes them live (links or loads them) once, after
    /// construction; they never change afterwards (kernel tables persist).
    pub fn page_table_roots(&self) -> ([PhysAddr; 2], usize) {
        self.map.roots()
    }

    /// Checks the allocator's bookkeeping: the space's own invariants, every
    /// area in the table reserved in the space and vice versa, lazy pages on
    /// the lists equal to `vmap_lazy_nr` (when no free is in flight), live
    /// pages mapped and lazy pages unmapped.
    pub fn check_consistency(&self) -> Result<(), &'static str> {
        let kva = self.kva.lock();
        kva.space.check_invariants()?;
        if kva.space.len() != kva.areas.len() {
            return Err("area table and space disagree on the number of areas");
        }
        let mut lazy_pages = 0;
        for (a, info) in kva.space.iter().zip(kva.areas.sorted()) {
            if a.va_start != info.start || a.va_end != info.end {
                return Err("area table and space disagree on a range");
            }
            let mapped = self.map.translate(info.start).is_some();
            if info.kind == AreaKind::VmapBlock && info.state == AreaState::Live {
                continue; // a live block maps only the pages carved from it
            }
            match info.state {
                AreaState::Live if !mapped => return Err("live area not mapped"),
                AreaState::Lazy if mapped => return Err("lazy area still mapped"),
                AreaState::Lazy => lazy_pages += info.pages,
                AreaState::Live => {}
            }
        }
        drop(kva);
        if self.lazy.listed_pages() != lazy_pages && !release_before_flush(&self.policy) {
            return Err("lazy lists disagree with the lazy areas");
        }
        if self.lazy.nr() != lazy_pages && !release_before_flush(&self.policy) {
            return Err("vmap_lazy_nr disagrees with the lazy areas");
        }
        Ok(())
    }
}
