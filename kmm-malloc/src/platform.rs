//! The platform the library runs slub-core on: the region's pages, real
//! CPUs ([`LinuxCpus`]), the target's DW-CAS and a lock that yields.

use crate::region::Region;
use arch_api::{LinuxCpus, Platform, SoftTlbCpu};
use core::sync::atomic::{AtomicBool, Ordering};

/// The platform type (slub-core maps nothing: the layout and TLB are
/// placeholders).
pub struct Preload;

// SAFETY: `Region` keeps the `PageSource` promise (its own impl says how);
// `LinuxCpus` keeps `CpuLocal`'s; `YieldLock` is a mutual-exclusion lock.
unsafe impl Platform for Preload {
    type Layout = arch_ia64_sim::Ia64Sim;
    type Mem = &'static Region;
    type Tlb = SoftTlbCpu<'static>;
    type Cpu = LinuxCpus;
    type Lock = YieldLock;
    type DwCas = slub_core::DefaultDwCas;
}

/// A test-and-set lock that spins briefly, then yields the CPU: in user
/// space a holder can be preempted, and a pure spin lock would then burn
/// the waiter's whole time slice (16 threads on 2 CPUs).
#[derive(Debug)]
pub struct YieldLock(AtomicBool);

// SAFETY: `lock` returns only after swapping `false` to `true` with Acquire
// (exclusive ownership); `unlock` releases with Release.
unsafe impl lock_api::RawMutex for YieldLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = YieldLock(AtomicBool::new(false));
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        let mut spins = 0u32;
        while !self.try_lock() {
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        !self.0.load(Ordering::Relaxed)
            && self
                .0
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}
