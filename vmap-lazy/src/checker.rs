//! The stale-TLB checker.
//!
//! Lazy flushing is correct only if a virtual range is never handed out again
//! while some CPU may still hold a translation for it. [`AllocCheck`] is the
//! hook a vmalloc calls with every range it hands out once a test set one
//! (`Vmalloc::set_alloc_check`; feature `testing`, test support only). With `std`,
//! [`StaleTlbChecker`] asks the software TLB model
//! ([`SoftTlb::holder`]) whether any simulated CPU may still translate an
//! address in the new range, and counts violations.

#[cfg(all(feature = "std", feature = "testing"))]
use arch_api::SoftTlb;
use arch_api::VirtAddr;

/// Called with each virtual range the allocator is about to hand out.
pub trait AllocCheck: Sync {
    /// `[start, end)` was just reserved for a new area.
    fn on_alloc(&self, start: VirtAddr, end: VirtAddr);
}

impl<C: AllocCheck + ?Sized> AllocCheck for &C {
    #[inline]
    fn on_alloc(&self, start: VirtAddr, end: VirtAddr) {
        (**self).on_alloc(start, end)
    }
}

/// A range handed out while a CPU could still translate part of it.
#[cfg(all(feature = "std", feature = "testing"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleTlbViolation {
    /// Start of the new area.
    pub start: VirtAddr,
    /// End of the new area.
    pub end: VirtAddr,
    /// A CPU that may still hold a translation inside it.
    pub cpu: usize,
    /// The lowest such page.
    pub page: VirtAddr,
}

/// Counts allocations of ranges some simulated CPU may still translate.
#[cfg(all(feature = "std", feature = "testing"))]
#[derive(Debug)]
pub struct StaleTlbChecker<'t> {
    tlb: &'t SoftTlb,
    checks: std::sync::atomic::AtomicU64,
    violations: std::sync::atomic::AtomicU64,
    first: std::sync::Mutex<Option<StaleTlbViolation>>,
}

#[cfg(all(feature = "std", feature = "testing"))]
impl<'t> StaleTlbChecker<'t> {
    /// A checker over the TLB model `tlb`.
    pub fn new(tlb: &'t SoftTlb) -> Self {
        Self {
            tlb,
            checks: 0.into(),
            violations: 0.into(),
            first: std::sync::Mutex::new(None),
        }
    }

    /// Ranges checked.
    pub fn checks(&self) -> u64 {
        self.checks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Ranges handed out while a CPU could still translate them.
    pub fn violations(&self) -> u64 {
        self.violations.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The first violation seen.
    pub fn first_violation(&self) -> Option<StaleTlbViolation> {
        *self.first.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(all(feature = "std", feature = "testing"))]
impl AllocCheck for StaleTlbChecker<'_> {
    fn on_alloc(&self, start: VirtAddr, end: VirtAddr) {
        use std::sync::atomic::Ordering::Relaxed;
        self.checks.fetch_add(1, Relaxed);
        if let Some((cpu, page)) = self.tlb.holder(start, end) {
            self.violations.fetch_add(1, Relaxed);
            self.first
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(StaleTlbViolation {
                    start,
                    end,
                    cpu,
                    page,
                });
        }
    }
}

#[cfg(all(test, feature = "std", feature = "testing"))]
mod tests {
    use super::*;
    use arch_api::{CostModel, TlbFlush};

    #[test]
    fn counts_ranges_a_cpu_still_translates() {
        let tlb = SoftTlb::new(2, 4096, CostModel::FREE);
        let c = StaleTlbChecker::new(&tlb);
        let va = |p: u64| VirtAddr::new(0x1000_0000 + p * 4096);
        tlb.touch(1, va(3));
        c.on_alloc(va(0), va(3));
        assert_eq!(c.violations(), 0);
        c.on_alloc(va(2), va(4));
        assert_eq!(c.violations(), 1);
        assert_eq!(
            c.first_violation(),
            Some(StaleTlbViolation {
                start: va(2),
                end: va(4),
                cpu: 1,
                page: va(3)
            })
        );
        tlb.on(0).flush_range(va(0), va(8), 4096);
        c.on_alloc(va(2), va(4));
        assert_eq!((c.checks(), c.violations()), (3, 1));
    }
}
