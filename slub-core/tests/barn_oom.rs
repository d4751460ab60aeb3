//! The sheaves front when the page source fails at the barn: a full sheaf
//! must never be both in the barn and flushed (objects freed twice).
#![cfg(not(kmm_loom))]

use arch_api::{FrameError, FrameSource, PhysAddr, PhysArena, PhysMap};
use slub_core::testing::HostedPlatform;
use slub_core::{ArenaPages, CacheConfig, CacheFlags, KmemCache, PageSource, ThreadCpus};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

/// Arena pages whose allocations fail while `fail` is set.
struct FailPages<'a> {
    inner: ArenaPages<'a>,
    fail: &'a AtomicBool,
}

impl FrameSource for FailPages<'_> {
    fn granule(&self) -> u64 {
        self.inner.granule()
    }
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(FrameError::OutOfFrames);
        }
        self.inner.alloc(size, align)
    }
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        self.inner.free(addr, size)
    }
}

impl PhysMap for FailPages<'_> {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        self.inner.phys_to_ptr(addr)
    }
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.inner.ptr_to_phys(ptr)
    }
}

// SAFETY: forwards to `ArenaPages`, which meets the contract; failing an
// allocation is always allowed.
unsafe impl PageSource for FailPages<'_> {}

#[test]
fn barn_exchange_without_memory_for_an_empty_sheaf_frees_nothing_twice() {
    let a = PhysArena::new(16 << 20, 4096).unwrap();
    let fail = AtomicBool::new(false);
    // 500 pointers per sheaf: one sheaf per pool page, so the pool has no
    // spare chunk and the barn must allocate a page for an empty sheaf.
    let cap = 500;
    let mut c = KmemCache::<HostedPlatform<FailPages<'_>, ThreadCpus>>::with_config(
        "barn-oom",
        8,
        8,
        CacheFlags::SHEAVES,
        FailPages {
            inner: ArenaPages::new(&a),
            fail: &fail,
        },
        ThreadCpus,
        CacheConfig {
            sheaf_capacity: cap,
            barn_max_full: 4,
            barn_max_empty: 0,
            ..CacheConfig::default()
        },
    )
    .unwrap();
    let n = 3 * cap;
    let objs: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
    // Main and spare full.
    for &p in &objs[..2 * cap] {
        // SAFETY: allocated above, freed once.
        unsafe { c.free(p) }.unwrap();
    }
    // The next free swaps the full main for an empty sheaf at the barn,
    // which needs a page: none.
    fail.store(true, Ordering::Relaxed);
    for &p in &objs[2 * cap..] {
        // SAFETY: allocated above, freed once.
        unsafe { c.free(p) }.unwrap();
    }
    fail.store(false, Ordering::Relaxed);
    // Every object exactly once.
    let again: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
    let set: HashSet<_> = again.iter().map(|p| p.as_ptr() as usize).collect();
    assert_eq!(
        set.len(),
        n,
        "an object was freed twice and handed out twice"
    );
    for &p in &again {
        // SAFETY: allocated above, freed once.
        unsafe { c.free(p) }.unwrap();
    }
    c.destroy().unwrap();
    assert_eq!(a.frames_in_use(), 0);
}
