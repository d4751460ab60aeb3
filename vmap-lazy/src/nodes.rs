//! `NodeVmalloc`: vmalloc over vmap-core's concurrent fronts ([`VmapNodes`]:
//! the sharded `vmap_node`s of Linux 6.9, or the global-lock variant), with a
//! lazy list and an area table PER NODE, kept under that node's lock
//! ([`NodeLazy`], the front's lazy slot). Freed areas go back to the node
//! that owns them; one purge takes every node's lazy list and flushes the
//! union of all their ranges ONCE.
//!
//! `vmap_lazy_nr` is counted per node, under the node's lock together with
//! its lazy list (so a purge, which takes the list under that lock, sees
//! list and count agree), and folded into one shared counter in batches of
//! [`LAZY_BATCH`] pages, as Linux's `percpu_counter`: the purge trigger reads
//! the shared counter (short by less than one batch per node), and a vfree
//! on one CPU no longer writes a line every other CPU writes too. A node's
//! batch is added inside its lock and taken back by the purge that empties
//! the list, so the shared counter can never go below zero.
//!
//! What a small `vmalloc` / `vfree` pair writes is kept per node where it
//! can be, so that CPUs working on different nodes do not pass cache lines
//! back and forth: the backing frames come from and return to the node's
//! frame cache (`frame_cache.rs`), and the alloc / free counts are per node
//! (summed by [`NodeVmalloc::stats`]).

use crate::area::{AreaInfo, AreaKind, AreaState, Counters, PurgeReport, VmallocStats};
use crate::backing::VmallocMem;
use crate::checker::{AllocCheck, NoCheck};
use crate::error::VmallocError;
use crate::frame_cache::FrameCache;
use crate::lazy::LazyRange;
use crate::mapper::{Mapper, is_shortage, pages_for};
use crate::purge::{LazyMaxPages, PurgeCtx, PurgePolicy};
use crate::vmap_block::{VMAP_BBMAP_BITS, VMAP_MAX_ALLOC, VmapBlocks};
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use arch_api::sync::{DefaultRawMutex, RawMutex};
use arch_api::{FrameSource, MapFlags, PageTableLayout, PhysAddr, PhysMap, TlbFlush, VirtAddr};
use core::sync::atomic::{AtomicU64, Ordering};
use vmap_core::{VmapArea, VmapError, VmapNodes};

/// Pages a node counts before it adds them to the shared `vmap_lazy_nr`.
pub(crate) const LAZY_BATCH: u64 = 64;

/// One node's lazy-free state: its areas, its lazy list and its count of
/// lazy pages (the front keeps it under the node's lock).
#[derive(Debug, Default)]
pub struct NodeLazy {
    areas: BTreeMap<u64, AreaInfo>,
    lazy: Vec<LazyRange>,
    /// Pages on `lazy`.
    lazy_pages: u64,
    /// The part of `lazy_pages` not yet added to the shared counter.
    unfolded: u64,
}

/// What one node keeps apart from the others: its frame cache and its
/// counts of `vmalloc`s and `vfree`s (aligned with the cache, which is
/// aligned to two cache lines).
struct PerNode<R: RawMutex> {
    frames: FrameCache<R>,
    allocs: AtomicU64,
    frees: AtomicU64,
}

/// vmalloc over a concurrent front `N` (global lock or sharded nodes).
pub struct NodeVmalloc<
    'm,
    L: PageTableLayout,
    M: FrameSource + PhysMap + ?Sized,
    T: TlbFlush,
    N: VmapNodes<Lazy = NodeLazy>,
    P: PurgePolicy = LazyMaxPages,
    C: AllocCheck = NoCheck,
    R: RawMutex = DefaultRawMutex,
> {
    map: Mapper<'m, L, M, R>,
    nodes: N,
    blocks: VmapBlocks<R>,
    nr: AtomicU64,
    underflows: AtomicU64,
    tlb: T,
    policy: P,
    check: C,
    cpus: u32,
    counters: Counters,
    per_node: Vec<PerNode<R>>,
}

impl<'m, L, M, T, N, P, C, R> NodeVmalloc<'m, L, M, T, N, P, C, R>
where
    L: PageTableLayout,
    M: FrameSource + PhysMap + ?Sized,
    T: TlbFlush,
    N: VmapNodes<Lazy = NodeLazy>,
    P: PurgePolicy,
    C: AllocCheck,
    R: RawMutex,
{
    /// vmalloc over the front `nodes` (whose page size must be the layout's),
    /// in page tables of its own.
    pub fn new(
        mem: &'m VmallocMem<'m, M>,
        nodes: N,
        tlb: T,
        policy: P,
        check: C,
        cpus: u32,
    ) -> Result<Self, VmallocError> {
        Self::over(Mapper::new(mem)?, nodes, tlb, policy, check, cpus)
    }

    /// vmalloc over the front `nodes`, in the window the front covers of the
    /// kernel's own page table at `root` (see [`Vmalloc::attach`](crate::Vmalloc::attach)).
    ///
    /// # Safety
    ///
    /// As for [`Vmalloc::attach`](crate::Vmalloc::attach).
    pub unsafe fn attach(
        mem: &'m VmallocMem<'m, M>,
        root: PhysAddr,
        nodes: N,
        tlb: T,
        policy: P,
        check: C,
        cpus: u32,
    ) -> Result<Self, VmallocError> {
        let (start, end) = nodes.range();
        // SAFETY: forwarded to the caller.
        let map = unsafe { Mapper::attach(mem, root, start..end)? };
        Self::over(map, nodes, tlb, policy, check, cpus)
    }

    fn over(
        map: Mapper<'m, L, M, R>,
        nodes: N,
        tlb: T,
        policy: P,
        check: C,
        cpus: u32,
    ) -> Result<Self, VmallocError> {
        if nodes.page_size() != L::PAGE_SIZE {
            return Err(VmallocError::Setup(VmapError::BadPageSize {
                page_size: nodes.page_size(),
            }));
        }
        let per_node = (0..nodes.nr_nodes())
            .map(|_| PerNode {
                frames: FrameCache::new(),
                allocs: AtomicU64::new(0),
                frees: AtomicU64::new(0),
            })
            .collect();
        Ok(Self {
            map,
            nodes,
            blocks: VmapBlocks::new(cpus as usize),
            nr: AtomicU64::new(0),
            underflows: AtomicU64::new(0),
            tlb,
            policy,
            check,
            cpus,
            counters: Counters::default(),
            per_node,
        })
    }

    /// The front.
    pub fn nodes(&self) -> &N {
        &self.nodes
    }

    /// `vmap_lazy_nr`: every node's lazy pages (takes each node's lock).
    pub fn vmap_lazy_nr(&self) -> u64 {
        (0..self.nodes.nr_nodes())
            .map(|n| self.nodes.with_lazy(n, |nl| nl.lazy_pages))
            .sum()
    }

    /// The shared counter the purge trigger reads: `vmap_lazy_nr` less the
    /// pages each node has not folded in yet (under [`LAZY_BATCH`] each).
    fn lazy_nr_folded(&self) -> u64 {
        self.nr.load(Ordering::Acquire)
    }

    fn ctx(&self) -> PurgeCtx {
        PurgeCtx {
            lazy_pages: self.lazy_nr_folded(),
            cpus: self.cpus,
            page_size: L::PAGE_SIZE,
        }
    }

    fn node_of(&self, node: u16) -> usize {
        usize::from(node) % self.nodes.nr_nodes()
    }

    /// `vmalloc(size)` from CPU `cpu`'s node; aligned to `align` (a power of
    /// two, at least a page).
    pub fn vmalloc_on(&self, cpu: usize, size: u64, align: u64) -> Result<VirtAddr, VmallocError> {
        let pages = pages_for(size, L::PAGE_SIZE)?;
        let align = align.max(L::PAGE_SIZE);
        match self.try_vmalloc(cpu, pages, align) {
            Err(e) if is_shortage(&e) => {
                self.counters.retries.fetch_add(1, Ordering::Relaxed);
                self.purge_vmap_area_lazy();
                self.nodes.drain_pools();
                self.try_vmalloc(cpu, pages, align)
            }
            r => r,
        }
    }

    /// Reserves `pages` pages aligned to `align` on `cpu`'s node; runs the
    /// allocation check.
    fn reserve(&self, cpu: usize, pages: u64, align: u64) -> Result<VmapArea, VmallocError> {
        let (vstart, vend) = self.nodes.range();
        let area = self
            .nodes
            .alloc(cpu, pages * L::PAGE_SIZE, align, vstart, vend)
            .map_err(|e| match e {
                VmapError::Overflow { size, .. } => VmallocError::Overflow { size },
                e => VmallocError::NoVirtualSpace(e),
            })?;
        self.check.on_alloc(area.va_start, area.va_end);
        Ok(area)
    }

    fn publish(&self, area: &VmapArea, pages: u64, caller: &'static str, kind: AreaKind) {
        let info = AreaInfo {
            start: area.va_start,
            end: area.va_end,
            pages,
            caller,
            kind,
            state: AreaState::Live,
        };
        let node = self.node_of(area.node);
        self.nodes
            .with_lazy(node, |nl| nl.areas.insert(area.va_start.as_u64(), info));
        self.per_node[node].allocs.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs `f`; on a shortage purges, drains the node pools and runs it
    /// once more.
    fn with_retry<X>(&self, f: impl Fn() -> Result<X, VmallocError>) -> Result<X, VmallocError> {
        match f() {
            Err(e) if is_shortage(&e) => {
                self.counters.retries.fetch_add(1, Ordering::Relaxed);
                self.purge_vmap_area_lazy();
                self.nodes.drain_pools();
                f()
            }
            r => r,
        }
    }

    fn try_vmalloc(&self, cpu: usize, pages: u64, align: u64) -> Result<VirtAddr, VmallocError> {
        let area = self.reserve(cpu, pages, align)?;
        let cache = &self.per_node[self.node_of(area.node)].frames;
        if let Err(e) = self.map.map_new_cached(cache, area.va_start, pages) {
            // Cannot fail: reserved just now and not published.
            let _ = self.nodes.free_area(&area);
            return Err(e);
        }
        self.tlb.sync_new_entries();
        self.publish(&area, pages, "vmalloc", AreaKind::Vmalloc);
        Ok(area.va_start)
    }

    /// `vmap(frames, flags)` from CPU `cpu`'s node; the frames stay the
    /// caller's.
    pub fn vmap_on(
        &self,
        cpu: usize,
        frames: &[PhysAddr],
        flags: MapFlags,
    ) -> Result<VirtAddr, VmallocError> {
        if frames.is_empty() {
            return Err(VmallocError::ZeroSize);
        }
        if let Some(f) = frames.iter().find(|f| !f.is_aligned(L::PAGE_SIZE)) {
            return Err(VmallocError::UnalignedFrame { frame: f.as_u64() });
        }
        let pages = frames.len() as u64;
        pages_for(pages.saturating_mul(L::PAGE_SIZE), L::PAGE_SIZE)?;
        self.with_retry(|| {
            let area = self.reserve(cpu, pages, L::PAGE_SIZE)?;
            if let Err(e) = self.map.map_frames(area.va_start, frames, flags) {
                let _ = self.nodes.free_area(&area);
                return Err(e);
            }
            self.tlb.sync_new_entries();
            self.publish(&area, pages, "vmap", AreaKind::Vmap);
            Ok(area.va_start)
        })
    }

    /// `vunmap(addr)`: as [`vfree`](Self::vfree) for a `vmap` area.
    pub fn vunmap(&self, addr: VirtAddr) -> Result<(), VmallocError> {
        if addr.as_u64() == 0 {
            return Ok(());
        }
        self.free_kind(addr, AreaKind::Vmap)
    }

    /// `vm_map_ram(frames)` on CPU `cpu`: up to [`VMAP_MAX_ALLOC`] pages
    /// from the CPU's vmap block (see `vmap_block.rs`), larger ones a plain
    /// [`vmap_on`](Self::vmap_on).
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
            return self.vmap_on(cpu, frames, flags);
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
                    let area = self.reserve(cpu, VMAP_BBMAP_BITS, VMAP_BBMAP_BITS * ps)?;
                    self.publish(&area, VMAP_BBMAP_BITS, "vmap_block", AreaKind::VmapBlock);
                    Ok(area.va_start.as_u64())
                })
            },
            |va| {
                self.check.on_alloc(va, VirtAddr::new(va.as_u64() + n * ps));
                self.map.map_frames(va, frames, flags)?;
                self.tlb.sync_new_entries();
                Ok(())
            },
        )
    }

    /// `vm_unmap_ram(addr, count)`: as [`Vmalloc::vm_unmap_ram`](crate::Vmalloc::vm_unmap_ram).
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

    /// A block with every page dirty goes on its node's lazy list.
    fn retire_block(&self, start: u64) {
        let Some(area) = self.nodes.find(VirtAddr::new(start)) else {
            return;
        };
        let node = self.node_of(area.node);
        self.nodes.with_lazy(node, |nl| {
            if let Some(info) = nl.areas.get_mut(&start) {
                info.state = AreaState::Lazy;
            }
        });
        self.publish_lazy(node, start, area.va_end.as_u64(), VMAP_BBMAP_BITS);
    }

    /// Publish on node `node`'s lazy list and count, in one critical
    /// section of the node (see the module docs); then ask the policy.
    fn publish_lazy(&self, node: usize, start: u64, end: u64, pages: u64) {
        self.nodes.with_lazy(node, |nl| {
            nl.lazy.push(LazyRange {
                start,
                end,
                pages,
                released: false,
            });
            nl.lazy_pages += pages;
            nl.unfolded += pages;
            if nl.unfolded >= LAZY_BATCH {
                // Inside the lock: the purge that takes these pages back
                // takes the lock after this add.
                self.nr
                    .fetch_add(core::mem::take(&mut nl.unfolded), Ordering::AcqRel);
            }
        });
        self.per_node[node].frees.fetch_add(1, Ordering::Relaxed);
        if self.policy.after_free(&self.ctx()) {
            // Not the public purge: the frame caches are for exactly this
            // workload and stay filled.
            self.purge_with(None);
        }
    }

    /// `vm_unmap_aliases()`: one flush for every node's lazy areas and every
    /// CPU's vmap-block dirty pages; returns the frame caches' frames to the
    /// source, as [`purge_vmap_area_lazy`](Self::purge_vmap_area_lazy).
    pub fn vm_unmap_aliases(&self) -> PurgeReport {
        self.drain_frame_caches();
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

    /// `vfree(addr)`: as [`Vmalloc::vfree`](crate::Vmalloc::vfree); the area
    /// goes on the lazy list of the node that owns it.
    pub fn vfree(&self, addr: VirtAddr) -> Result<(), VmallocError> {
        if addr.as_u64() == 0 {
            return Ok(());
        }
        self.free_kind(addr, AreaKind::Vmalloc)
    }

    fn free_kind(&self, addr: VirtAddr, kind: AreaKind) -> Result<(), VmallocError> {
        let not_found = VmallocError::NotFound {
            addr: addr.as_u64(),
        };
        let area = self.nodes.find(addr).ok_or(not_found)?;
        let node = self.node_of(area.node);
        let info = self.nodes.with_lazy(node, |nl| {
            let info = match nl.areas.get_mut(&addr.as_u64()) {
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
            Ok(*info)
        })?;
        let unmapped = if kind == AreaKind::Vmalloc {
            let cache = &self.per_node[node].frames;
            self.map.unmap_cached(cache, info.start, info.end)
        } else {
            self.map.unmap_noflush(info.start, info.end, true)
        };
        self.publish_lazy(node, info.start.as_u64(), info.end.as_u64(), info.pages);
        unmapped
    }

    /// One purge over all nodes: take every lazy list, flush the union once,
    /// then give each range back to its node. It also returns every frame
    /// the per-node frame caches hold to the frame source (a shortage retry
    /// purges first, and leak checks count after a purge); the purges the
    /// policy starts from `vfree` leave the caches alone.
    pub fn purge_vmap_area_lazy(&self) -> PurgeReport {
        self.drain_frame_caches();
        self.purge_with(None)
    }

    /// Returns the frames of every node's frame cache to the source.
    fn drain_frame_caches(&self) {
        for p in &self.per_node {
            self.map.drain_cache(&p.frames);
        }
    }

    fn purge_with(&self, extra: Option<(u64, u64)>) -> PurgeReport {
        let nr_nodes = self.nodes.nr_nodes();
        let mut taken: Vec<(usize, Vec<LazyRange>)> = Vec::new();
        let (mut start, mut end, mut pages, mut areas) = (u64::MAX, 0, 0, 0u64);
        // What the taken lists had added to the shared counter.
        let mut folded = 0;
        for n in 0..nr_nodes {
            let list = self.nodes.with_lazy(n, |nl| {
                folded += nl.lazy_pages - nl.unfolded;
                nl.lazy_pages = 0;
                nl.unfolded = 0;
                core::mem::take(&mut nl.lazy)
            });
            for r in &list {
                start = start.min(r.start);
                end = end.max(r.end);
                pages += r.pages;
                areas += 1;
            }
            if !list.is_empty() {
                taken.push((n, list));
            }
        }
        if let Some((s, e)) = extra {
            start = start.min(s);
            end = end.max(e);
        }
        if taken.is_empty() && extra.is_none() {
            return PurgeReport::default();
        }
        self.counters.flush(&self.tlb, start, end, L::PAGE_SIZE);
        for (n, list) in &taken {
            self.nodes.with_lazy(*n, |nl| {
                for r in list {
                    nl.areas.remove(&r.start);
                }
            });
            for r in list {
                // Cannot fail: a lazy area stays reserved until here.
                let _ = self.nodes.free(VirtAddr::new(r.start));
            }
        }
        if taken.is_empty() {
            return PurgeReport {
                start,
                end,
                ..PurgeReport::default()
            };
        }
        if self.nr.fetch_sub(folded, Ordering::AcqRel) < folded {
            self.underflows.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.purges.fetch_add(1, Ordering::Relaxed);
        self.counters
            .areas_purged
            .fetch_add(areas, Ordering::Relaxed);
        PurgeReport {
            areas,
            pages,
            start,
            end,
        }
    }

    /// Writes through the page table (the software MMU; feature `testing`).
    ///
    /// A `vmalloc` area's byte is written under its node's lock, not the
    /// page-table lock: `vfree` marks the area lazy under that lock before
    /// it clears the pages (without the page-table lock, `unmap_cached`), so
    /// while the lock is held and the area is live its frames stay mapped,
    /// and writers to the node's areas are serialised. Other kinds take the
    /// page-table lock, as their unmaps do.
    #[cfg(feature = "testing")]
    pub fn write_byte(&self, va: VirtAddr, byte: u8) -> Result<(), VmallocError> {
        let not_found = VmallocError::NotFound { addr: va.as_u64() };
        let area = self.nodes.find(va).ok_or(not_found)?;
        let node = self.node_of(area.node);
        let owned = self.nodes.with_lazy(node, |nl| {
            match nl.areas.get(&area.va_start.as_u64()) {
                Some(i) if i.state == AreaState::Live && i.kind == AreaKind::Vmalloc => {
                    // SAFETY: `va` lies in this live vmalloc area (`find`
                    // returns the area containing it); its `vfree` must take
                    // this node lock, held until the write is done, and so
                    // must every other write to the node's vmalloc areas.
                    Some(unsafe { self.map.write_byte_owned(va, byte) })
                }
                Some(i) if i.state == AreaState::Live => None,
                _ => Some(Err(not_found)),
            }
        });
        match owned {
            Some(r) => r,
            None => self.map.write_byte(va, byte),
        }
    }

    /// Every area of every node (vmallocinfo), sorted by address.
    pub fn areas(&self) -> Vec<AreaInfo> {
        let mut v = Vec::new();
        for n in 0..self.nodes.nr_nodes() {
            self.nodes
                .with_lazy(n, |nl| v.extend(nl.areas.values().copied()));
        }
        v.sort_by_key(|a| a.start);
        v
    }

    /// The counters now.
    pub fn stats(&self) -> VmallocStats {
        let mut s = self.counters.snapshot(
            self.cpus,
            self.vmap_lazy_nr(),
            self.underflows.load(Ordering::Relaxed),
        );
        for p in &self.per_node {
            s.allocs += p.allocs.load(Ordering::Relaxed);
            s.frees += p.frees.load(Ordering::Relaxed);
        }
        s
    }

    /// `vmalloc_to_page`: the physical address `va` maps to now (offset
    /// within the page included), or `None` if nothing maps it. A kernel
    /// reads an area's frames with it (to build a scatter list, to reach a
    /// page through its direct map).
    pub fn vmalloc_to_phys(&self, va: VirtAddr) -> Option<PhysAddr> {
        self.map.translate(va).map(|t| t.phys)
    }

    /// Page-table bytes held.
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

    /// The frame adapter.
    pub fn mem(&self) -> &'m VmallocMem<'m, M> {
        self.map.mem
    }
}
