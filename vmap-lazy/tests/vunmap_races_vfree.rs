//! Frames change hands explicitly: `vunmap` on one thread and `vfree` on
//! others, at once, cannot lose a frame or free one twice, and the caller's
//! pages behind a `vmap` are never freed by vmalloc.
//!
//! vmalloc frees what it owns (a vfree's backing frames) and never what it
//! was lent (a `vmap` of the caller's pages): the lent frames leave each
//! `vunmap`'s zap through a `Lent` sink given to that one call, not through
//! a mode of the shared frame source, so a `vfree` on another CPU at the
//! same instant still returns its frames. The frame source here refuses,
//! and counts, any free of a frame the caller lent or that is not out.

mod common;

use arch_api::{FrameError, FrameSource, MapFlags, PhysAddr, PhysArena, PhysMap};
use common::*;
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use vmap_lazy::{LazyMaxPages, Vmalloc, VmallocMem};

/// An arena that remembers the frames a `vmap` caller lent and counts every
/// free that touches one of them or fails.
struct Tracked<'a> {
    inner: &'a PhysArena,
    lent: Mutex<HashSet<u64>>,
    bad_frees: AtomicU64,
}

impl Tracked<'_> {
    fn check_free(&self, addr: PhysAddr, size: u64) -> bool {
        let lent = self.lent.lock().unwrap();
        let hit = (0..size / PAGE).any(|i| lent.contains(&(addr.as_u64() + i * PAGE)));
        if hit {
            self.bad_frees.fetch_add(1, Ordering::Relaxed);
        }
        !hit
    }
}

impl FrameSource for Tracked<'_> {
    fn granule(&self) -> u64 {
        self.inner.granule()
    }
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        self.inner.alloc(size, align)
    }
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        if !self.check_free(addr, size) {
            return Err(FrameError::NotAllocated);
        }
        self.inner.free(addr, size).inspect_err(|_| {
            self.bad_frees.fetch_add(1, Ordering::Relaxed);
        })
    }
}

// SAFETY: hands out the arena's frames only, reached through its direct map.
unsafe impl vmap_lazy::testing::HostedMem for Tracked<'_> {}

impl PhysMap for Tracked<'_> {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        self.inner.phys_to_ptr(addr)
    }
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.inner.ptr_to_phys(ptr)
    }
}

type V<'m> = Vmalloc<'m, K<'m, Tracked<'m>>>;

/// Rounds per thread (few under Miri, which runs them a thousand times
/// slower).
const ROUNDS: usize = if cfg!(miri) { 12 } else { 400 };

#[test]
fn vunmap_and_vfree_at_once_lose_and_double_free_nothing() {
    let arena = arena(64 << 20);
    let src = Tracked {
        inner: &arena,
        lent: Mutex::new(HashSet::new()),
        bad_frees: AtomicU64::new(0),
    };
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    // The caller's pages, straight from the arena: vmalloc never owns them.
    let lent: Vec<PhysAddr> = (0..48).map(|_| arena.alloc(PAGE, PAGE).unwrap()).collect();
    src.lent
        .lock()
        .unwrap()
        .extend(lent.iter().map(|f| f.as_u64()));
    std::thread::scope(|s| {
        // vmap / vunmap of the caller's pages, large enough that the
        // walker's zap (not the leaf path) clears them.
        s.spawn(|| {
            for i in 0..ROUNDS {
                let n = 17 + i % 31;
                let a = v.vmap(&lent[..n], MapFlags::WRITE).unwrap();
                v.write_byte(a, i as u8).unwrap();
                v.vunmap(a).unwrap();
            }
        });
        // vmalloc / vfree, small (leaf path) and large (walker zap).
        for t in 0..2u64 {
            let v = &v;
            s.spawn(move || {
                for i in 0..ROUNDS as u64 {
                    let pages = if i % 2 == 0 { 1 + i % 4 } else { 20 + i % 20 };
                    let a = v.vmalloc(pages * PAGE).unwrap();
                    v.write_byte(va(a, pages - 1), t as u8).unwrap();
                    v.vfree(a).unwrap();
                }
            });
        }
        s.spawn(|| {
            for _ in 0..ROUNDS / 8 {
                v.purge_vmap_area_lazy();
                std::thread::yield_now();
            }
        });
    });
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
    assert_eq!(
        src.bad_frees.load(Ordering::Relaxed),
        0,
        "a lent or free frame was freed"
    );
    assert_eq!(
        mem.bytes_out(),
        v.pagetable_bytes(),
        "no frame of vmalloc's was lost"
    );
    // The caller still owns each of its pages, once: each frees exactly once.
    src.lent.lock().unwrap().clear();
    for f in lent {
        arena.free(f, PAGE).unwrap();
    }
    assert_eq!(arena.bytes_in_use(), v.pagetable_bytes());
}
