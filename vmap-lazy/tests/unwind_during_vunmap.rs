//! A vmalloc that runs out of frames while another CPU is inside `vunmap`
//! must still return the frames it took.
//!
//! A regression test: `vunmap` used to zap with the shared frame adapter
//! switched to keep frees (the frames are the caller's), under the
//! page-table lock; a failed vmalloc returning its partly allocated frames
//! without that lock went through the same adapter, and those frames were
//! dropped for good whenever a `vunmap` zap ran at that moment (the soak's
//! "frames still out after the final purge" once its frame arena filled
//! up). Now `vunmap` hands its frames to a `Lent` sink for that one zap and
//! the adapter has no mode, but the interleaving stays tested.
//!
//! The interleaving is forced, not hoped for: the frame source parks the
//! `vunmap` thread in the middle of its zap (in the direct-map lookup of a
//! table page, page-table lock held) while the main thread's vmalloc fails.

mod common;

use arch_api::{FrameError, FrameSource, MapFlags, PhysAddr, PhysArena, PhysMap};
use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vmap_lazy::{LazyMaxPages, Vmalloc, VmallocError, VmallocMem};

/// Frames from an arena, refusing allocations beyond a budget; when armed,
/// the next direct-map lookup parks its caller until released.
struct Gated<'a> {
    inner: &'a PhysArena,
    budget: AtomicU64,
    armed: AtomicBool,
    parked: AtomicBool,
    release: AtomicBool,
}

impl FrameSource for Gated<'_> {
    fn granule(&self) -> u64 {
        self.inner.granule()
    }
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        self.budget
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| b.checked_sub(1))
            .map_err(|_| FrameError::OutOfFrames)?;
        self.inner.alloc(size, align)
    }
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        self.inner.free(addr, size)
    }
}

// SAFETY: hands out the arena's frames only, reached through its direct map
// (a parked lookup still returns the arena's pointer).
unsafe impl vmap_lazy::testing::HostedMem for Gated<'_> {}

impl PhysMap for Gated<'_> {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        if self.armed.swap(false, Ordering::AcqRel) {
            self.parked.store(true, Ordering::Release);
            // Bounded, so a broken test fails instead of hanging.
            let t0 = Instant::now();
            while !self.release.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(10) {
                std::thread::yield_now();
            }
        }
        self.inner.phys_to_ptr(addr)
    }
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.inner.ptr_to_phys(ptr)
    }
}

#[test]
fn vmalloc_failing_during_a_vunmap_zap_returns_its_frames() {
    let arena = arena(4 << 20);
    let gated = Gated {
        inner: &arena,
        budget: AtomicU64::new(u64::MAX),
        armed: AtomicBool::new(false),
        parked: AtomicBool::new(false),
        release: AtomicBool::new(false),
    };
    let mem = VmallocMem::new(&gated);
    let tlb = tlb();
    let v: Vmalloc<'_, K<'_, Gated<'_>>> =
        Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    // The caller's frames, mapped with vmap (the walker's tables come now).
    let own: Vec<PhysAddr> = (0..4).map(|_| arena.alloc(PAGE, PAGE).unwrap()).collect();
    let a = v.vmap(&own, MapFlags::WRITE | MapFlags::GLOBAL).unwrap();
    let tables = v.pagetable_bytes();
    assert_eq!(mem.bytes_out(), tables, "vmap takes no frames of its own");

    gated.armed.store(true, Ordering::Release);
    std::thread::scope(|s| {
        let unmapper = s.spawn(|| v.vunmap(a));
        let t0 = Instant::now();
        while !gated.parked.load(Ordering::Acquire) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "vunmap never zapped"
            );
            std::thread::yield_now();
        }
        // vunmap is parked inside its zap, page-table lock held. A 4-page
        // vmalloc gets 2 frames, then the source runs dry: the 2 go back.
        gated.budget.store(2, Ordering::Release);
        let r = v.vmalloc(4 * PAGE);
        gated.release.store(true, Ordering::Release);
        assert!(
            matches!(r, Err(VmallocError::OutOfFrames(_))),
            "the source ran dry: {r:?}"
        );
        unmapper.join().unwrap().unwrap();
    });

    gated.budget.store(u64::MAX, Ordering::Release);
    v.purge_vmap_area_lazy();
    assert!(v.areas().is_empty());
    assert_eq!(
        mem.bytes_out(),
        v.pagetable_bytes(),
        "the failed vmalloc's frames went back to the source"
    );
    for f in &own {
        arena
            .free(*f, PAGE)
            .expect("vunmap left the caller's frames alone");
    }
    assert_eq!(arena.bytes_in_use(), v.pagetable_bytes());
}
