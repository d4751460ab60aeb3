//! What the software TLB model charges for invalidations the host cannot
//! really perform.
//!
//! A hosted run has no shootdowns to time, so the model charges each operation
//! a cost, paid as a calibrated busy-wait on the flushing thread so that
//! wall-clock comparisons between policies include it. Defaults and sources:
//!
//! * `page_flush_ns = 100`: Linux's x86 TLB code sizes its single-page flush
//!   ceiling on "each single flush is about 100 ns" (arch/x86/mm/tlb.c,
//!   `tlb_single_page_flush_ceiling`, 2014).
//! * `full_flush_ns = 3300`: the same comment takes 33 single flushes (~3 µs)
//!   as the point where a full flush, refills included, costs no more; so the
//!   full flush is charged 33 × 100 ns.
//! * `ipi_ns = 1000` per remote CPU: a shootdown interrupts every other CPU and
//!   waits for its acknowledgement; N. Amit, "Optimizing the TLB Shootdown
//!   Algorithm with Page Access Tracking", USENIX ATC 2017, §2, reports a
//!   shootdown taking microseconds; 1 µs per remote CPU is the low end of that.
//!
//! Setting a cost to 0 switches that charge off.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The charged costs, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostModel {
    /// One single-page invalidation.
    pub page_flush_ns: u64,
    /// One full flush (its refill cost included).
    pub full_flush_ns: u64,
    /// One shootdown interrupt to one remote CPU, round trip.
    pub ipi_ns: u64,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            page_flush_ns: 100,
            full_flush_ns: 3300,
            ipi_ns: 1000,
        }
    }
}

impl CostModel {
    /// No charges: counts only.
    pub const FREE: CostModel = CostModel {
        page_flush_ns: 0,
        full_flush_ns: 0,
        ipi_ns: 0,
    };
}

/// Spins for about `ns` nanoseconds. Uses a spin count calibrated once per
/// process (so short waits do not pay for clock reads), topped up against the
/// clock for long ones.
pub fn busy_wait_ns(ns: u64) {
    if ns == 0 {
        return;
    }
    let per_us = *SPINS_PER_US.get_or_init(calibrate);
    if ns < 2_000 {
        spin(ns * per_us / 1000);
        return;
    }
    let until = Instant::now() + Duration::from_nanos(ns);
    while Instant::now() < until {
        spin(per_us / 4);
    }
}

static SPINS_PER_US: OnceLock<u64> = OnceLock::new();

/// Calibrates [`busy_wait_ns`] now (about 1 ms, once per process) rather
/// than inside the first charged flush, where it would land in a timed
/// region: [`SoftTlb::new`](crate::SoftTlb::new) calls it when the model
/// charges anything.
pub fn calibrate_busy_wait() {
    SPINS_PER_US.get_or_init(calibrate);
}

fn spin(n: u64) {
    for _ in 0..n {
        core::hint::spin_loop();
    }
}

fn calibrate() -> u64 {
    // Take the fastest of a few 200 µs windows: a preempted window only
    // makes the loop look slower.
    let mut best = 1u64;
    for _ in 0..5 {
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < Duration::from_micros(200) {
            spin(64);
            n += 64;
        }
        let us = start.elapsed().as_nanos().max(1) as u64;
        best = best.max(n * 1000 / us);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_cost_returns_at_once_and_defaults_are_documented_values() {
        busy_wait_ns(0);
        calibrate_busy_wait();
        assert!(SPINS_PER_US.get().is_some_and(|&n| n >= 1));
        let d = CostModel::default();
        assert_eq!(
            (d.page_flush_ns, d.full_flush_ns, d.ipi_ns),
            (100, 3300, 1000)
        );
        assert_eq!(CostModel::FREE.ipi_ns, 0);
    }
}
