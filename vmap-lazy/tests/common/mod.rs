//! Shared set-up: a PhysArena, the software TLB of 4 CPUs and a checker.
#![allow(dead_code)]

use arch_api::sync::DefaultRawMutex;
use arch_api::{
    CostModel, FrameError, FrameSource, HostedCpus, PhysAddr, PhysArena, PhysMap, SoftTlb, VirtAddr,
};
use std::sync::atomic::{AtomicU64, Ordering};

pub type L = arch_x86_64::X86_64Pml4;
pub const PAGE: u64 = 4096;
pub const VSTART: u64 = 0xffff_c900_0000_0000;
pub const CPUS: usize = 4;

pub fn arena(bytes: u64) -> PhysArena {
    PhysArena::new(bytes, PAGE).expect("arena")
}

pub fn tlb() -> SoftTlb {
    SoftTlb::new(CPUS, PAGE, CostModel::FREE)
}

/// The hosted platform over frame source `M`.
pub type K<'a, M = PhysArena> = vmap_lazy::testing::Hosted<'a, L, M>;

/// One space of `pages` pages at `VSTART`, searched by `F`.
pub fn space<F: vmap_core::FreeAreaSearch>(
    pages: u64,
) -> vmap_core::GlobalVmap<DefaultRawMutex, vmap_lazy::NodeLazy, F> {
    vmap_core::GlobalVmap::new(
        VirtAddr::new(VSTART),
        VirtAddr::new(VSTART + pages * PAGE),
        PAGE,
    )
    .expect("space")
}

/// `CPUS` hosted CPUs (the calling thread runs on CPU 0 unless it says
/// otherwise with `HostedCpus::run_on`).
pub fn cpus() -> HostedCpus {
    HostedCpus::new(CPUS)
}

pub fn va(a: VirtAddr, page: u64) -> VirtAddr {
    VirtAddr::new(a.as_u64() + page * PAGE)
}

/// A frame source that refuses every allocation after the first `budget`.
pub struct Failing<'a> {
    pub inner: &'a PhysArena,
    pub budget: AtomicU64,
}

impl<'a> Failing<'a> {
    pub fn new(inner: &'a PhysArena, budget: u64) -> Self {
        Self {
            inner,
            budget: AtomicU64::new(budget),
        }
    }
    pub fn set(&self, budget: u64) {
        self.budget.store(budget, Ordering::Relaxed);
    }
}

impl FrameSource for Failing<'_> {
    fn granule(&self) -> u64 {
        self.inner.granule()
    }
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        let ok = self
            .budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
            .is_ok();
        if !ok {
            return Err(FrameError::OutOfFrames);
        }
        self.inner.alloc(size, align)
    }
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        self.inner.free(addr, size)
    }
}

// SAFETY: hands out the arena's frames only, reached through its direct map.
unsafe impl vmap_lazy::testing::HostedMem for Failing<'_> {}

impl PhysMap for Failing<'_> {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        self.inner.phys_to_ptr(addr)
    }
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.inner.ptr_to_phys(ptr)
    }
}
