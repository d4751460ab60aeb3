//! A counted software model of the TLBs of N simulated CPUs (hosted only).
//!
//! Each CPU remembers every translation it has used ([`SoftTlb::touch`]) until
//! a flush covering it. The model keeps no capacity limit on purpose: a real
//! TLB may evict early, but nothing guarantees it, so "may still hold" is the
//! safe answer. That is the question lazy purging must never get wrong:
//! [`SoftTlb::holder`] answers "may any CPU still hold a translation in
//! `[a, b)`?" before a virtual range is handed out again.
//!
//! The translations are indexed by page, each page with the set of CPUs
//! holding it (`held`), so that question costs one probe per 64 pages of
//! the range whatever the number of CPUs: the stale-TLB checker asks it on every
//! allocation, and a per-CPU ordered set made it most of the cost of a
//! simulated `vmalloc`.
//!
//! Flushes are initiated from one CPU ([`SoftTlb::on`]) and, as for kernel
//! (global) mappings on x86, reach every other CPU by a shootdown IPI; each
//! event is counted and charged per the [`CostModel`].

mod held;

use crate::cost::{CostModel, busy_wait_ns};
use crate::{DEFAULT_FLUSH_CEILING_PAGES, TlbFlush, VirtAddr};
use held::{CpuMask, HeldPages, count_except};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Counters of a [`SoftTlb`], as reported by the harness.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlbStats {
    /// Flush operations (a range flush is one event).
    pub flush_events: u64,
    /// Pages invalidated one by one.
    pub pages_flushed: u64,
    /// Full flushes (explicit, or a range above the ceiling).
    pub full_flushes: u64,
    /// Shootdown interrupts sent to remote CPUs.
    pub ipis: u64,
    /// Nanoseconds charged by the cost model (`tlb_cost_ns`).
    pub cost_ns: u64,
}

#[derive(Default)]
struct Counters {
    flush_events: AtomicU64,
    pages_flushed: AtomicU64,
    full_flushes: AtomicU64,
    ipis: AtomicU64,
    cost_ns: AtomicU64,
}

/// The TLBs of `cpus` simulated CPUs.
pub struct SoftTlb {
    page_shift: u32,
    ceiling: u64,
    /// IPIs only to remote CPUs that may hold a translation of the range.
    cpumask: bool,
    cost: CostModel,
    cpus: usize,
    held: Mutex<HeldPages>,
    counters: Counters,
}

impl core::fmt::Debug for SoftTlb {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SoftTlb")
            .field("cpus", &self.cpus)
            .field("page_size", &(1u64 << self.page_shift))
            .field("ceiling", &self.ceiling)
            .field("cost", &self.cost)
            .field("stats", &self.stats())
            .finish()
    }
}

impl SoftTlb {
    /// A model of `cpus` CPUs (at least 1) translating pages of `page_size`
    /// bytes (a power of two), with Linux's 33-page flush ceiling.
    pub fn new(cpus: usize, page_size: u64, cost: CostModel) -> Self {
        assert!(
            page_size.is_power_of_two(),
            "page size must be a power of two"
        );
        let page_shift = page_size.trailing_zeros();
        if cost != CostModel::FREE {
            crate::cost::calibrate_busy_wait();
        }
        Self {
            page_shift,
            ceiling: DEFAULT_FLUSH_CEILING_PAGES,
            cpumask: false,
            cost,
            cpus: cpus.max(1),
            held: Mutex::new(HeldPages::new(cpus.max(1), page_shift)),
            counters: Counters::default(),
        }
    }

    /// Changes the range-flush ceiling (pages).
    pub fn with_ceiling(mut self, pages: u64) -> Self {
        self.ceiling = pages;
        self
    }

    /// Sends shootdown IPIs only to the remote CPUs that may hold a
    /// translation in the flushed range (for an explicit full flush: any
    /// translation), as a user address space's flush reaches only the CPUs in
    /// its `mm_cpumask`, tracked here per page (Amit, ATC 2017, "page access
    /// tracking"). Off (the default), every flush interrupts every other CPU,
    /// as for global kernel mappings. The initiating CPU always flushes
    /// itself and is charged for it.
    pub fn with_cpumask_shootdown(mut self, on: bool) -> Self {
        self.cpumask = on;
        self
    }

    /// Number of simulated CPUs.
    pub fn cpus(&self) -> usize {
        self.cpus
    }

    /// The page size translations are tracked in.
    pub fn page_size(&self) -> u64 {
        1 << self.page_shift
    }

    /// The cost model in force.
    pub fn cost(&self) -> CostModel {
        self.cost
    }

    /// `cpu` used the translation of the page containing `va` (it is now cached).
    pub fn touch(&self, cpu: usize, va: VirtAddr) {
        assert!(cpu < self.cpus, "cpu {cpu} out of range");
        let pn = va.as_u64() >> self.page_shift;
        self.lock().insert_range(cpu, pn, pn + 1);
    }

    /// `cpu` used the translation of every page meeting `[start, end)` (one
    /// lock for all of them).
    pub fn touch_range(&self, cpu: usize, start: VirtAddr, end: VirtAddr) {
        assert!(cpu < self.cpus, "cpu {cpu} out of range");
        if end <= start {
            return;
        }
        let (first, last) = self.page_span(start, end);
        self.lock().insert_range(cpu, first, last);
    }

    /// The lowest page of `[start, end)` some CPU may still hold a
    /// translation of, and the lowest-numbered CPU holding it; `None` when no
    /// CPU can.
    pub fn holder(&self, start: VirtAddr, end: VirtAddr) -> Option<(usize, VirtAddr)> {
        if end <= start {
            return None;
        }
        let (first, last) = self.page_span(start, end);
        self.lock()
            .lowest(first, last)
            .map(|(cpu, pn)| (cpu, VirtAddr::new(pn << self.page_shift)))
    }

    /// Whether any CPU may still hold a translation in `[start, end)`.
    pub fn may_hold(&self, start: VirtAddr, end: VirtAddr) -> bool {
        self.holder(start, end).is_some()
    }

    /// Translations `cpu` currently caches.
    pub fn held(&self, cpu: usize) -> usize {
        self.lock().count(cpu) as usize
    }

    /// A [`TlbFlush`] whose flushes are initiated by `cpu`.
    pub fn on(&self, cpu: usize) -> SoftTlbCpu<'_> {
        assert!(cpu < self.cpus, "cpu {cpu} out of range");
        SoftTlbCpu { tlb: self, cpu }
    }

    /// The counters so far.
    pub fn stats(&self) -> TlbStats {
        let c = &self.counters;
        TlbStats {
            flush_events: c.flush_events.load(Ordering::Relaxed),
            pages_flushed: c.pages_flushed.load(Ordering::Relaxed),
            full_flushes: c.full_flushes.load(Ordering::Relaxed),
            ipis: c.ipis.load(Ordering::Relaxed),
            cost_ns: c.cost_ns.load(Ordering::Relaxed),
        }
    }

    /// Zeroes the counters (cached translations are kept).
    pub fn reset_stats(&self) {
        let c = &self.counters;
        for a in [
            &c.flush_events,
            &c.pages_flushed,
            &c.full_flushes,
            &c.ipis,
            &c.cost_ns,
        ] {
            a.store(0, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> MutexGuard<'_, HeldPages> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn page_span(&self, start: VirtAddr, end: VirtAddr) -> (u64, u64) {
        let first = start.as_u64() >> self.page_shift;
        let last = (end.as_u64() - 1) >> self.page_shift;
        (first, last + 1)
    }

    /// One flush event initiated by CPU `from` reaching every CPU (or, with
    /// the cpumask on, those that may hold the ranges): `None` flushes
    /// everything, a list of ranges flushes their pages (all of them, or
    /// everything if together they exceed the ceiling) with one shootdown.
    fn flush(&self, from: usize, ranges: Option<&[(VirtAddr, VirtAddr)]>) {
        // At most this many page spans are flushed one by one; a longer
        // list is a full flush (a gather sends a handful).
        const MAX_SPANS: usize = 16;
        let mut spans = [(0u64, 0u64); MAX_SPANS];
        let mut n = 0;
        let mut pages = 0u64;
        let mut full = ranges.is_none();
        for &(s, e) in ranges.unwrap_or(&[]) {
            if e <= s {
                continue;
            }
            let (first, last) = self.page_span(s, e);
            pages = pages.saturating_add(last - first);
            if n == MAX_SPANS || pages > self.ceiling {
                full = true;
                break;
            }
            spans[n] = (first, last);
            n += 1;
        }
        if !full && n == 0 {
            return; // only empty ranges: nothing to invalidate
        }
        let spans = &spans[..n];
        let c = &self.counters;
        let mut held = self.lock();
        // With the cpumask, a CPU left out of the shootdown holds nothing in
        // the ranges (or it would have been interrupted) and keeps the rest.
        // With the cpumask and nothing held anywhere (a zap of pages no CPU
        // touched): nobody to interrupt, nothing to drop, no mask to build.
        let nobody = self.cpumask && held.is_empty();
        let mut targets = self.cpumask.then(|| match ranges {
            _ if nobody => CpuMask::new(),
            None => held.holders(None),
            Some(list) => {
                let mut m = held.no_cpus();
                for &(s, e) in list.iter().filter(|(s, e)| e > s) {
                    held.holders_into(Some(self.page_span(s, e)), &mut m);
                }
                m
            }
        });
        let remote = match &targets {
            Some(m) => count_except(m, from),
            None => self.cpus as u64 - 1,
        };
        let mut cost = remote * self.cost.ipi_ns;
        if full {
            match &mut targets {
                None => held.clear(),
                Some(m) if nobody => debug_assert!(m.is_empty()),
                Some(m) => {
                    m[from / 64] |= 1 << (from % 64);
                    held.clear_cpus(m);
                }
            }
            c.full_flushes.fetch_add(1, Ordering::Relaxed);
            cost += self.cost.full_flush_ns;
        } else {
            for &(first, last) in spans {
                held.remove_range(first, last);
            }
            c.pages_flushed.fetch_add(pages, Ordering::Relaxed);
            cost += pages * self.cost.page_flush_ns;
        }
        drop(held);
        c.flush_events.fetch_add(1, Ordering::Relaxed);
        c.ipis.fetch_add(remote, Ordering::Relaxed);
        c.cost_ns.fetch_add(cost, Ordering::Relaxed);
        busy_wait_ns(cost);
    }
}

/// The flush interface of a [`SoftTlb`], as seen from one initiating CPU.
#[derive(Clone, Copy, Debug)]
pub struct SoftTlbCpu<'a> {
    tlb: &'a SoftTlb,
    cpu: usize,
}

impl SoftTlbCpu<'_> {
    /// The initiating CPU.
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// The model behind this handle.
    pub fn tlb(&self) -> &SoftTlb {
        self.tlb
    }
}

impl TlbFlush for SoftTlbCpu<'_> {
    fn flush_page(&self, va: VirtAddr) {
        let ps = self.tlb.page_size();
        let start = va.align_down(ps);
        self.tlb.flush(
            self.cpu,
            Some(&[(start, VirtAddr::new(start.as_u64().saturating_add(ps)))]),
        );
    }

    fn flush_all(&self) {
        self.tlb.flush(self.cpu, None);
    }

    fn flush_ceiling_pages(&self) -> u64 {
        self.tlb.ceiling
    }

    fn flush_range(&self, start: VirtAddr, end: VirtAddr, _page_size: u64) {
        self.tlb.flush(self.cpu, Some(&[(start, end)]));
    }

    /// One shootdown for the whole list: the remote CPUs are interrupted
    /// once, each page is charged as a single-page flush.
    fn flush_ranges(&self, ranges: &[(VirtAddr, VirtAddr)], _page_size: u64) {
        self.tlb.flush(self.cpu, Some(ranges));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 4096;

    fn va(n: u64) -> VirtAddr {
        VirtAddr::new(0xffff_c900_0000_0000 + n * P)
    }

    #[test]
    fn range_flush_counts_pages_and_ipis() {
        let tlb = SoftTlb::new(4, P, CostModel::FREE);
        tlb.touch(1, va(3));
        tlb.touch(2, va(10));
        tlb.on(0).flush_range(va(0), va(8), P);
        let s = tlb.stats();
        assert_eq!(s.flush_events, 1);
        assert_eq!(s.pages_flushed, 8);
        assert_eq!(s.full_flushes, 0);
        assert_eq!(s.ipis, 3);
        assert!(!tlb.may_hold(va(0), va(8)));
        assert_eq!(tlb.holder(va(0), va(100)), Some((2, va(10))));
        assert_eq!(tlb.held(1), 0);
        assert_eq!(tlb.held(2), 1);
    }

    #[test]
    fn above_ceiling_is_a_full_flush() {
        let tlb = SoftTlb::new(2, P, CostModel::FREE);
        tlb.touch(0, va(500));
        tlb.touch(1, va(1));
        tlb.on(1).flush_range(va(0), va(34), P);
        let s = tlb.stats();
        assert_eq!((s.full_flushes, s.pages_flushed, s.ipis), (1, 0, 1));
        assert!(
            !tlb.may_hold(va(0), va(1000)),
            "a full flush drops everything"
        );
        tlb.on(0).flush_range(va(0), va(33), P);
        assert_eq!(
            tlb.stats().full_flushes,
            1,
            "33 pages is still page by page"
        );
        assert_eq!(tlb.stats().pages_flushed, 33);
    }

    #[test]
    fn holder_query_is_half_open_and_exact_at_edges() {
        let tlb = SoftTlb::new(3, P, CostModel::FREE);
        tlb.touch(2, VirtAddr::new(va(5).as_u64() + 123));
        assert!(!tlb.may_hold(va(0), va(5)));
        assert!(tlb.may_hold(va(5), va(6)));
        assert!(!tlb.may_hold(va(6), va(9)));
        assert!(!tlb.may_hold(va(6), va(6)));
        tlb.on(0).flush_page(VirtAddr::new(va(5).as_u64() + 7));
        assert!(!tlb.may_hold(va(0), va(100)));
        assert_eq!(tlb.stats().pages_flushed, 1);
    }

    #[test]
    fn cost_model_charges_per_page_full_and_remote_cpu() {
        let cost = CostModel {
            page_flush_ns: 7,
            full_flush_ns: 1000,
            ipi_ns: 11,
        };
        let tlb = SoftTlb::new(8, P, cost);
        tlb.on(3).flush_range(va(0), va(2), P);
        assert_eq!(tlb.stats().cost_ns, 2 * 7 + 7 * 11);
        tlb.on(3).flush_all();
        assert_eq!(tlb.stats().cost_ns, 2 * 7 + 7 * 11 + 1000 + 7 * 11);
        tlb.reset_stats();
        assert_eq!(tlb.stats(), TlbStats::default());
    }

    #[test]
    fn a_range_list_is_one_shootdown_for_its_pages() {
        let cost = CostModel {
            page_flush_ns: 7,
            full_flush_ns: 1000,
            ipi_ns: 11,
        };
        let tlb = SoftTlb::new(4, P, cost);
        for p in [3, 1 << 20, 1 << 30, 5] {
            tlb.touch(1, va(p));
        }
        let far = [
            (va(3), va(4)),
            (va(1 << 20), va((1 << 20) + 1)),
            (va(9), va(9)),
        ];
        tlb.on(0).flush_ranges(&far, P);
        let s = tlb.stats();
        assert_eq!(
            (s.flush_events, s.pages_flushed, s.full_flushes, s.ipis),
            (1, 2, 0, 3),
            "one event, two pages, the empty range ignored, one IPI per remote CPU"
        );
        assert_eq!(s.cost_ns, 2 * 7 + 3 * 11);
        assert!(!tlb.may_hold(va(3), va(4)) && !tlb.may_hold(va(1 << 20), va((1 << 20) + 1)));
        assert_eq!(tlb.held(1), 2, "pages 5 and 2^30 were not in the list");
        // Together above the ceiling (33 pages): one full flush.
        tlb.on(0)
            .flush_ranges(&[(va(0), va(20)), (va(1 << 30), va((1 << 30) + 20))], P);
        let s = tlb.stats();
        assert_eq!((s.flush_events, s.full_flushes, s.pages_flushed), (2, 1, 2));
        assert_eq!(tlb.held(1), 0);
        // Only empty ranges: no event at all.
        tlb.on(0).flush_ranges(&[(va(7), va(7))], P);
        tlb.on(0).flush_ranges(&[], P);
        assert_eq!(tlb.stats().flush_events, 2);
        // With the cpumask: the union of the holders of every range.
        let m = SoftTlb::new(4, P, cost).with_cpumask_shootdown(true);
        m.touch(1, va(3));
        m.touch(2, va(1 << 20));
        m.touch(3, va(50));
        m.on(0).flush_ranges(&far, P);
        assert_eq!(m.stats().ipis, 2, "CPUs 1 and 2, not 3");
        assert_eq!(m.held(3), 1);
        // With the cpumask and nothing held anywhere: no IPI, still counted.
        let e = SoftTlb::new(4, P, cost).with_cpumask_shootdown(true);
        e.on(1).flush_ranges(&far, P);
        e.on(1).flush_all();
        let s = e.stats();
        assert_eq!(
            (s.ipis, s.flush_events, s.full_flushes, s.pages_flushed),
            (0, 2, 1, 2)
        );
        assert_eq!(s.cost_ns, 2 * 7 + 1000);
    }

    #[test]
    fn cpumask_shootdown_interrupts_only_cpus_holding_the_range() {
        let cost = CostModel {
            page_flush_ns: 7,
            full_flush_ns: 1000,
            ipi_ns: 11,
        };
        let tlb = SoftTlb::new(4, P, cost).with_cpumask_shootdown(true);
        tlb.touch(1, va(3));
        tlb.touch(2, va(500));
        tlb.touch(3, va(3));
        tlb.on(0).flush_range(va(0), va(8), P);
        assert_eq!(tlb.stats().ipis, 2, "CPUs 1 and 3 hold page 3");
        assert_eq!(tlb.stats().cost_ns, 8 * 7 + 2 * 11);
        assert!(!tlb.may_hold(va(0), va(8)));
        tlb.on(0).flush_range(va(0), va(8), P);
        assert_eq!(tlb.stats().ipis, 2, "nobody holds it any more");
        // Above the ceiling: a full flush, still only for the holders.
        tlb.touch(1, va(40));
        tlb.on(0).flush_range(va(0), va(100), P);
        let s = tlb.stats();
        assert_eq!((s.ipis, s.full_flushes), (3, 1));
        assert_eq!(
            tlb.held(2),
            1,
            "CPU 2 was not interrupted and keeps page 500"
        );
        assert_eq!(tlb.held(1), 0);
        tlb.on(0).flush_all();
        assert_eq!(
            tlb.stats().ipis,
            4,
            "an explicit full flush reaches every non-empty TLB"
        );
        assert_eq!(tlb.held(2), 0);
        // Off (the default): every other CPU, holding or not.
        let all = SoftTlb::new(4, P, cost);
        all.on(0).flush_range(va(0), va(8), P);
        assert_eq!(all.stats().ipis, 3);
    }

    #[test]
    fn touch_range_holds_every_page_once() {
        let tlb = SoftTlb::new(8, P, CostModel::FREE);
        tlb.touch_range(5, VirtAddr::new(va(2).as_u64() + 1), va(6));
        tlb.touch(5, va(3));
        assert_eq!(tlb.held(5), 4, "pages 2..6, page 3 counted once");
        assert_eq!(tlb.holder(va(0), va(3)), Some((5, va(2))));
        assert!(!tlb.may_hold(va(6), va(10)));
        tlb.touch(1, va(4));
        assert_eq!(tlb.holder(va(4), va(5)), Some((1, va(4))), "lowest CPU");
        tlb.on(0).flush_range(va(3), va(5), P);
        assert_eq!((tlb.held(5), tlb.held(1)), (2, 0));
        assert_eq!(tlb.holder(va(3), va(100)), Some((5, va(5))));
    }

    #[test]
    fn more_than_64_cpus() {
        let tlb = SoftTlb::new(200, P, CostModel::FREE).with_cpumask_shootdown(true);
        tlb.touch(199, va(9));
        tlb.touch(70, va(9));
        tlb.touch(3, va(1000));
        assert_eq!(tlb.holder(va(0), va(1 << 20)), Some((70, va(9))));
        tlb.on(0).flush_range(va(0), va(16), P);
        assert_eq!(tlb.stats().ipis, 2, "CPUs 70 and 199");
        assert_eq!((tlb.held(70), tlb.held(199), tlb.held(3)), (0, 0, 1));
        tlb.on(3).flush_all();
        assert_eq!(tlb.stats().ipis, 2, "only CPU 3 held anything: no IPI");
        assert_eq!(tlb.held(3), 0);
    }

    #[test]
    fn single_cpu_sends_no_ipis() {
        let tlb = SoftTlb::new(1, P, CostModel::default());
        tlb.on(0).flush_all();
        assert_eq!(tlb.stats().ipis, 0);
        assert_eq!(tlb.stats().cost_ns, 3300);
    }
}
