//! `Vmalloc`: `vmalloc` / `vfree` / `vmap` / `vunmap` / `vm_map_ram` and
//! `purge_vmap_area_lazy` over a virtual-address front (vmap-core's
//! [`VmapNodes`]: one space under one lock, [`OneSpace`], or the sharded
//! `vmap_node`s of Linux 6.9, [`Sharded`]), a zap-walker page table and the
//! OS's frames, all named by one [`Platform`].
//!
//! * `vmalloc(size)`: reserve a range on the calling CPU's node, take one
//!   frame per page (through the node's frame cache), map them. Any failure
//!   unwinds all of it; a shortage of virtual space or frames purges the
//!   lazy areas, drains the front's pools and retries once.
//! * `vfree(addr)`: one search of the owning node's area record finds the
//!   area and marks it lazy; its entries are cleared at once WITHOUT a TLB
//!   flush, its frames go back, and its range stays reserved on the node's
//!   lazy list (`lazy.rs`). The [`PurgePolicy`] decides when to purge.
//! * `purge_vmap_area_lazy()`: take every node's lazy list, flush the TLB
//!   ONCE for the union of their ranges, and only then give the ranges back
//!   to their nodes.
//!
//! Locks: a node's lock (its space and its [`NodeLazy`]), the page-table
//! lock, a CPU's vmap-block lock, a frame cache's lock; a vmap-block lock
//! may be held while a node lock is taken, no other two at once.

mod free;
mod huge;
mod inspect;
mod nowait;
mod ram;
mod realloc;

use crate::area::{AreaInfo, AreaKind, AreaState, Counters};
use crate::backing::VmallocMem;
use crate::error::VmallocError;
use crate::flags::VmFlags;
use crate::frame_cache::FrameCache;
use crate::lazy::{LazyCount, NodeLazy};
use crate::mapper::{Mapper, is_shortage, pages_for};
use crate::purge::{LazyMaxPages, PurgeCtx, PurgePolicy};
use crate::vmap_block::VmapBlocks;
use alloc::vec::Vec;
use arch_api::{CpuLocal, MapFlags, PageTableLayout, PhysAddr, Platform, TlbFlush, VirtAddr};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use vmap_core::{
    AllocRequest, DefaultPolicy, GlobalVmap, ShardedVmap, VmapArea, VmapError, VmapNodes,
};

/// One space under one lock, searched by `F` (Linux before 6.9): the
/// default front.
pub type OneSpace<K, F = DefaultPolicy> = GlobalVmap<<K as Platform>::Lock, NodeLazy, F>;

/// Sharded `vmap_node`s with partitioned free space (Linux 6.9 and
/// beyond; vmap-core's [`ShardedVmap`]).
pub type Sharded<K> = ShardedVmap<<K as Platform>::Lock, NodeLazy>;

/// Pages a node of a multi-node front counts before it adds them to the
/// shared `vmap_lazy_nr` (one-node fronts add every page at once).
pub(crate) const LAZY_BATCH: u64 = 64;

/// What one node keeps apart from the others: its frame cache and its
/// counts of `vmalloc`s and `vfree`s (aligned with the cache, which is
/// aligned to two cache lines).
struct PerNode<R: arch_api::sync::RawMutex> {
    frames: FrameCache<R>,
    allocs: AtomicU64,
    frees: AtomicU64,
}

/// vmalloc on platform `K`, purging when `P` says, over the front `N`
/// (see the crate docs for an example).
pub struct Vmalloc<
    'm,
    K: Platform,
    P: PurgePolicy = LazyMaxPages,
    N: VmapNodes<Lazy = NodeLazy> = OneSpace<K>,
> {
    map: Mapper<'m, K::Layout, K::Mem, K::Lock>,
    nodes: N,
    blocks: VmapBlocks<K::Lock>,
    lazy: LazyCount,
    tlb: K::Tlb,
    cpus: K::Cpu,
    nr_cpus: u32,
    policy: P,
    counters: Counters,
    per_node: Vec<PerNode<K::Lock>>,
    #[cfg(feature = "testing")]
    test: inspect::TestHooks<'m>,
}

impl<'m, K, P, N> Vmalloc<'m, K, P, N>
where
    K: Platform,
    P: PurgePolicy,
    N: VmapNodes<Lazy = NodeLazy>,
{
    /// vmalloc over the front `nodes` (whose page size must be the
    /// layout's), in page tables of its own
    /// ([`page_table_roots`](Self::page_table_roots)), with frames and
    /// page tables from `mem`, purges flushed through `tlb`, the calling
    /// CPU from `cpus`.
    pub fn new(
        mem: &'m VmallocMem<'m, K::Mem>,
        nodes: N,
        tlb: K::Tlb,
        cpus: K::Cpu,
        policy: P,
    ) -> Result<Self, VmallocError> {
        Self::over(Mapper::new(mem)?, nodes, tlb, cpus, policy)
    }

    /// vmalloc over the window `nodes` covers of the kernel's own page table
    /// at `root` (what CR3 / TTBR1_EL1 holds), however the kernel built it:
    /// areas are mapped into that table, nothing has to be copied or
    /// loaded. The tables it adds in the window stay (kernel page tables are
    /// never freed); dropping the vmalloc leaves the table to the kernel.
    ///
    /// # Safety
    ///
    /// `root` is a live page table of the platform's layout whose tables
    /// `mem`'s `PhysMap` reaches, and while this vmalloc lives nothing else
    /// writes entries inside the window (the contract of zap-walker's
    /// `Walker::attach`).
    pub unsafe fn attach(
        mem: &'m VmallocMem<'m, K::Mem>,
        root: PhysAddr,
        nodes: N,
        tlb: K::Tlb,
        cpus: K::Cpu,
        policy: P,
    ) -> Result<Self, VmallocError> {
        let (start, end) = nodes.range();
        // SAFETY: forwarded to the caller.
        let map = unsafe { Mapper::attach(mem, root, start..end)? };
        Self::over(map, nodes, tlb, cpus, policy)
    }

    fn over(
        map: Mapper<'m, K::Layout, K::Mem, K::Lock>,
        nodes: N,
        tlb: K::Tlb,
        cpus: K::Cpu,
        policy: P,
    ) -> Result<Self, VmallocError> {
        if nodes.page_size() != K::Layout::PAGE_SIZE {
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
        let nr_cpus = cpus.nr_cpus().max(1);
        let batch = if nodes.nr_nodes() == 1 { 1 } else { LAZY_BATCH };
        Ok(Self {
            map,
            blocks: VmapBlocks::new(nr_cpus),
            lazy: LazyCount::new(batch),
            nodes,
            tlb,
            cpus,
            nr_cpus: u32::try_from(nr_cpus).unwrap_or(u32::MAX),
            policy,
            counters: Counters::default(),
            per_node,
            #[cfg(feature = "testing")]
            test: inspect::TestHooks::default(),
        })
    }

    /// The page size.
    pub const fn page_size(&self) -> u64 {
        K::Layout::PAGE_SIZE
    }

    /// The front.
    pub fn nodes(&self) -> &N {
        &self.nodes
    }

    /// The TLB flusher purges use.
    pub fn tlb(&self) -> &K::Tlb {
        &self.tlb
    }

    /// The memory adapter.
    pub fn mem(&self) -> &'m VmallocMem<'m, K::Mem> {
        self.map.mem
    }

    /// The calling CPU (a hint: which node and vmap block to use; a task
    /// that moves on meanwhile only works on another CPU's share).
    fn this_cpu(&self) -> usize {
        match self.cpus.current_cpu() {
            Some(c) => c,
            None => self.cpus.pin().1,
        }
    }

    fn ctx(&self) -> PurgeCtx {
        PurgeCtx {
            lazy_pages: self.lazy.nr(),
            cpus: self.nr_cpus,
            page_size: K::Layout::PAGE_SIZE,
        }
    }

    fn node_of(&self, node: u16) -> usize {
        usize::from(node) % self.nodes.nr_nodes()
    }

    /// `vmalloc(size)`: `size` bytes (rounded up to pages) of mapped memory,
    /// with a guard page after it.
    pub fn vmalloc(&self, size: u64) -> Result<VirtAddr, VmallocError> {
        self.vmalloc_with(size, K::Layout::PAGE_SIZE, VmFlags::empty(), "vmalloc")
    }

    /// `__vmalloc_node(size, align, …)`: as [`vmalloc`](Self::vmalloc),
    /// aligned to `align` bytes (a power of two; less than a page means a
    /// page).
    pub fn vmalloc_aligned(&self, size: u64, align: u64) -> Result<VirtAddr, VmallocError> {
        self.vmalloc_with(size, align, VmFlags::empty(), "vmalloc")
    }

    /// `__vmalloc_node(…, caller)`: as
    /// [`vmalloc_aligned`](Self::vmalloc_aligned), recording `caller` for
    /// vmallocinfo.
    pub fn vmalloc_caller(
        &self,
        size: u64,
        align: u64,
        caller: &'static str,
    ) -> Result<VirtAddr, VmallocError> {
        self.vmalloc_with(size, align, VmFlags::empty(), caller)
    }

    /// A kernel stack: `size` bytes with a guard page before and after, so
    /// that an underflow faults as an overflow does.
    pub fn vmalloc_stack(&self, size: u64) -> Result<VirtAddr, VmallocError> {
        self.vmalloc_with(
            size,
            K::Layout::PAGE_SIZE,
            VmFlags::GUARD_BEFORE,
            "vmalloc_stack",
        )
    }

    /// The general form: `size` bytes aligned to `align` (the returned
    /// address is aligned; a guard page before it lies below), guard pages
    /// and blocking as `flags` say (see [`VmFlags`]), recorded under
    /// `caller`.
    ///
    /// ```
    /// # use arch_api::{CostModel, HostedCpus, PhysArena, SoftTlb, VirtAddr};
    /// # use vmap_lazy::{LazyMaxPages, OneSpace, Vmalloc, VmallocMem, VmFlags};
    /// # type K<'a> = vmap_lazy::testing::Hosted<'a, arch_x86_64::X86_64Pml4>;
    /// # const PAGE: u64 = 4096;
    /// # let frames = PhysArena::new(1 << 20, PAGE).unwrap();
    /// # let mem = VmallocMem::new(&frames);
    /// # let tlb = SoftTlb::new(2, PAGE, CostModel::FREE);
    /// # let w = OneSpace::<K>::new(VirtAddr::new(0xffff_c900_0000_0000), VirtAddr::new(0xffff_c900_0100_0000), PAGE)?;
    /// # let v: Vmalloc<'_, K> = Vmalloc::new(&mem, w, tlb.on(0), HostedCpus::new(2), LazyMaxPages)?;
    /// let a = v.vmalloc_with(2 * PAGE, PAGE, VmFlags::empty(), "driver")?;
    /// let b = v.vmalloc_with(PAGE, PAGE, VmFlags::NO_GUARD, "early_map")?;
    /// // `a`'s guard page lies between the two areas; `b` has none.
    /// assert_eq!(b.as_u64(), a.as_u64() + 3 * PAGE);
    /// assert_eq!(v.vmalloc(PAGE)?.as_u64(), b.as_u64() + PAGE);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn vmalloc_with(
        &self,
        size: u64,
        align: u64,
        flags: VmFlags,
        caller: &'static str,
    ) -> Result<VirtAddr, VmallocError> {
        let pages = pages_for(size, K::Layout::PAGE_SIZE)?;
        let align = align.max(K::Layout::PAGE_SIZE);
        let cpu = self.this_cpu();
        if flags.contains(VmFlags::NOWAIT) {
            // Huge runs come from the frame source's slow path: not for a
            // request that must not wait.
            let flags = flags - VmFlags::HUGE;
            return self.try_vmalloc_nowait(cpu, pages, align, flags, caller);
        }
        if flags.contains(VmFlags::HUGE) && self.huge_span(pages).is_some() {
            return self.with_retry(|| self.try_vmalloc_huge(cpu, pages, align, flags, caller));
        }
        self.with_retry(|| self.try_vmalloc(cpu, pages, align, flags, caller))
    }

    /// Runs `f`; on a shortage of space or frames purges, drains the
    /// front's pools and runs it once more.
    fn with_retry<X>(&self, f: impl Fn() -> Result<X, VmallocError>) -> Result<X, VmallocError> {
        match f() {
            Err(e) if is_shortage(&e) => {
                self.counters.retries.fetch_add(1, Relaxed);
                self.purge_vmap_area_lazy();
                self.nodes.drain_pools();
                f()
            }
            r => r,
        }
    }

    /// The request for `pages` pages aligned to `align` with the guard
    /// pages of `flags` around them.
    fn request(
        pages: u64,
        align: u64,
        flags: VmFlags,
        window: (VirtAddr, VirtAddr),
    ) -> AllocRequest {
        let ps = K::Layout::PAGE_SIZE;
        let size = (pages + flags.guard_pages()) * ps;
        let req = AllocRequest::new(size, align, window.0, window.1);
        // A guard page before: the mapped part, one page in, is what must be
        // aligned.
        if flags.contains(VmFlags::GUARD_BEFORE) && align > ps {
            req.phase(align - ps)
        } else {
            req
        }
    }

    /// Reserves `pages` pages aligned to `align`, and the guard pages of
    /// `flags`, on `cpu`'s node; runs the allocation check and asks the
    /// policy.
    // Always inlined: the huge path calls it too, and a second caller
    // made LLVM keep it (and the front's search under it) out of line,
    // ~75 instructions more per small vmalloc/vfree (callgrind).
    #[inline(always)]
    fn reserve(
        &self,
        cpu: usize,
        pages: u64,
        align: u64,
        flags: VmFlags,
    ) -> Result<VmapArea, VmallocError> {
        let req = Self::request(pages, align, flags, self.nodes.range());
        let (area, visited) = self.nodes.alloc_counted(cpu, &req).map_err(front_error)?;
        self.counters.searched(visited);
        #[cfg(feature = "testing")]
        self.test.on_alloc(area.va_start, area.va_end);
        if self.policy.after_alloc(visited, &self.ctx()) {
            self.purge_with(None);
        }
        Ok(area)
    }

    /// The first mapped byte of `area`, reserved with `flags`.
    fn mapped_start(area: &VmapArea, flags: VmFlags) -> VirtAddr {
        let lead = flags.guard_pages_before() * K::Layout::PAGE_SIZE;
        VirtAddr::new(area.va_start.as_u64() + lead)
    }

    fn info(
        area: &VmapArea,
        pages: u64,
        caller: &'static str,
        kind: AreaKind,
        flags: VmFlags,
    ) -> AreaInfo {
        let start = Self::mapped_start(area, flags);
        AreaInfo {
            start,
            end: VirtAddr::new(start.as_u64() + pages * K::Layout::PAGE_SIZE),
            pages,
            caller,
            kind,
            state: AreaState::Live,
            flags: flags & VmFlags::AREA,
            spare: 0,
            large_leaves: 0,
            large_shift: 0,
        }
    }

    fn publish(
        &self,
        area: &VmapArea,
        pages: u64,
        caller: &'static str,
        kind: AreaKind,
        flags: VmFlags,
    ) {
        let info = Self::info(area, pages, caller, kind, flags);
        let node = self.node_of(area.node);
        self.nodes.with_lazy(node, |nl| nl.areas.insert(info));
        self.per_node[node].allocs.fetch_add(1, Relaxed);
    }

    #[inline(always)] // See `reserve`.
    fn try_vmalloc(
        &self,
        cpu: usize,
        pages: u64,
        align: u64,
        flags: VmFlags,
        caller: &'static str,
    ) -> Result<VirtAddr, VmallocError> {
        let area = self.reserve(cpu, pages, align, flags)?;
        let va = Self::mapped_start(&area, flags);
        let cache = &self.per_node[self.node_of(area.node)].frames;
        if let Err(e) = self.map.map_new_cached(cache, va, pages) {
            // Cannot fail: reserved just now and not published.
            let _ = self.nodes.free_area(&area);
            return Err(e);
        }
        self.tlb.sync_new_entries();
        self.publish(&area, pages, caller, AreaKind::Vmalloc, flags);
        Ok(va)
    }

    /// `vmap(frames, flags)`: maps the caller's frames (one per page)
    /// contiguously, with a guard page after them; they stay the caller's
    /// (`vunmap` does not free them).
    pub fn vmap(&self, frames: &[PhysAddr], flags: MapFlags) -> Result<VirtAddr, VmallocError> {
        let pages = self.check_frames(frames)?;
        let cpu = self.this_cpu();
        self.with_retry(|| {
            let area = self.reserve(cpu, pages, K::Layout::PAGE_SIZE, VmFlags::empty())?;
            if let Err(e) = self.map.map_frames(area.va_start, frames, flags) {
                let _ = self.nodes.free_area(&area);
                return Err(e);
            }
            self.tlb.sync_new_entries();
            self.publish(&area, pages, "vmap", AreaKind::Vmap, VmFlags::empty());
            Ok(area.va_start)
        })
    }

    /// The number of pages `frames` maps: not empty, every frame aligned.
    fn check_frames(&self, frames: &[PhysAddr]) -> Result<u64, VmallocError> {
        if frames.is_empty() {
            return Err(VmallocError::ZeroSize);
        }
        let ps = K::Layout::PAGE_SIZE;
        if let Some(f) = frames.iter().find(|f| !f.is_aligned(ps)) {
            return Err(VmallocError::UnalignedFrame { frame: f.as_u64() });
        }
        let pages = frames.len() as u64;
        pages_for(pages.saturating_mul(ps), ps)?;
        Ok(pages)
    }
}

/// A front's refusal as vmalloc reports it.
fn front_error(e: VmapError) -> VmallocError {
    match e {
        VmapError::Overflow { size, .. } => VmallocError::Overflow { size },
        VmapError::WouldBlock => VmallocError::WouldBlock,
        e => VmallocError::NoVirtualSpace(e),
    }
}
