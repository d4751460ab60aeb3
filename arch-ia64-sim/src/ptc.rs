//! `ptc.ga`: the global TLB purge, simulated on the `SoftTlb` model.
//!
//! ia64 needs no shootdown interrupts for a range: `ptc.g` / `ptc.ga`
//! broadcast the purge to the TLBs of every processor in the TLB coherence
//! domain (Intel Itanium Architecture Software Developer's Manual, Vol. 2
//! Part 2, §5.2.2.2.3: these instructions "obviate the need for performing
//! inter-processor interrupts"). `ptc.ga` also drops matching ALAT entries on
//! the remote processors; Linux used it for its global purges.
//!
//! # One purge, one aligned block
//!
//! The operands (Vol. 3, "ptc.g, ptc.ga — Purge Global Translation Cache")
//! are an address in `r3`, whose bits 63:61 select the region (and through its
//! region register the region id) and bits 60:0 the offset, and a size
//! `1 << r2{7:2}`; the purge covers the size-aligned block that contains the
//! address. So:
//!
//! * a range purge is **one** `ptc.ga` on the smallest aligned power-of-two
//!   block (at least one page) that covers the range ([`PurgeBlock`]). That
//!   can be far more than the range (two pages straddling a 2^k boundary
//!   round up to a 2^(k+1) block); the manual allows a purge to remove more
//!   than asked, "up to and including removal of all entries", so
//!   over-purging is correct. The simulation assumes every power-of-two size
//!   up to a whole region is purgeable; a real processor lists its purge
//!   sizes through `PAL_VM_PAGE_SIZE` (Vol. 2 §4.1.1.7), some with a
//!   region-wide purge. Linux instead sized the block from the range's length
//!   (capped at the largest supported purge), aligned the start down and
//!   issued one `ptc.ga` per block up to the end;
//! * a purge names one region, so a range that crosses a region boundary
//!   cannot be one `ptc.ga`. Such a range is flushed whole
//!   ([`flush_all`](arch_api::TlbFlush::flush_all)), as Linux's ia64 `mmu_gather` did
//!   (it also flushed everything for ranges of a TiB or more; here the
//!   `SoftTlb`'s page ceiling plays that part, see below).
//!
//! # What is charged
//!
//! A broadcast still costs every remote processor: its TLB is searched and
//! purged and the issuing CPU waits for the purge to complete across the
//! domain. The model charges it through the `SoftTlb` cost model as one
//! flush event: `ipi_ns` per remote CPU (the field keeps its name; on ia64 it
//! prices a remote purge, not an interrupt), plus the page cost of the block,
//! or one full flush when the block exceeds the model's ceiling (the model
//! then forgets every translation, which the manual also allows).
//! `PtcGa::ptc_ga_count` counts the instructions; the `SoftTlb`'s
//! `TlbStats` count the events, pages and charges.
//!
//! Not modelled: the manual limits how many global purges may be in flight
//! (`max_purges` of `PAL_VM_SUMMARY`) and asks software to serialise them
//! with a semaphore (Linux's `ptcg_lock`). [`flush_all`](arch_api::TlbFlush::flush_all)
//! has no broadcast form on ia64: Linux's `flush_tlb_all` interrupted every
//! CPU and ran a local `ptc.e` loop on each, so it is charged as the model's
//! full flush with IPIs and does not count as a `ptc.ga`.

use arch_api::VirtAddr;

use crate::Ia64Sim;

#[cfg(feature = "std")]
use arch_api::{CostModel, PageTableLayout, SoftTlb, TlbFlush};
#[cfg(feature = "std")]
use core::sync::atomic::{AtomicU64, Ordering};

/// The operands of one `ptc.ga`: a size-aligned block of `1 << log2_size`
/// bytes inside one region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PurgeBlock {
    /// First byte of the block (aligned to its size).
    pub base: VirtAddr,
    /// log2 of the block size (the value `ptc.ga` takes in `r2{7:2}`).
    pub log2_size: u32,
}

impl PurgeBlock {
    /// The smallest aligned block of at least `min_size` bytes (rounded up to
    /// a power of two, at most a region) covering `[start, end)`. `None` when
    /// the range is empty or crosses a region boundary (no single purge can
    /// cover it).
    pub fn covering(start: VirtAddr, end: VirtAddr, min_size: u64) -> Option<Self> {
        if end <= start {
            return None;
        }
        let (first, last) = (start.as_u64(), end.as_u64() - 1);
        if first >> Ia64Sim::REGION_SHIFT != last >> Ia64Sim::REGION_SHIFT {
            return None;
        }
        // The block is set by the highest bit in which first and last differ;
        // below 2^61 since both lie in one region.
        let differ = u64::BITS - (first ^ last).leading_zeros();
        let min = min_size.max(1).next_power_of_two().trailing_zeros();
        let log2_size = differ.max(min).min(Ia64Sim::REGION_SHIFT);
        Some(Self {
            base: start.align_down(1 << log2_size),
            log2_size,
        })
    }

    /// The block size in bytes.
    pub const fn size(self) -> u64 {
        1 << self.log2_size
    }

    /// The last byte of the block (inclusive: region 7's whole-region block
    /// ends at `u64::MAX`).
    pub const fn last(self) -> VirtAddr {
        VirtAddr::new(self.base.as_u64() + (self.size() - 1))
    }
}

/// The costs charged for ia64 flushes: arch-api's defaults, kept on purpose.
///
/// * `page_flush_ns = 100`, `full_flush_ns = 3300`: no sourced ia64 figure
///   was found, so the x86-derived defaults of [`CostModel`] stay.
/// * `ipi_ns = 1000` per remote CPU, charged once per `ptc.ga` (a remote
///   purge, not an interrupt) and per IPI of a full flush: no published
///   per-processor latency of a `ptc.ga` broadcast was found either, so the
///   1 µs of the default stays. ia64 and x86 runs then differ in how many
///   broadcasts they issue and how large, not in invented figures.
#[cfg(feature = "std")]
pub fn ia64_cost_model() -> CostModel {
    CostModel::default()
}

/// A [`SoftTlb`] of `cpus` CPUs with ia64's 16 KiB pages and
/// [`ia64_cost_model`].
#[cfg(feature = "std")]
pub fn ia64_soft_tlb(cpus: usize) -> SoftTlb {
    SoftTlb::new(cpus, Ia64Sim::PAGE_SIZE, ia64_cost_model())
}

/// The [`TlbFlush`] of the simulated ia64: range purges as `ptc.ga`
/// broadcasts issued from one CPU into a [`SoftTlb`] (see the module docs).
#[cfg(feature = "std")]
#[derive(Debug)]
pub struct PtcGa<'a> {
    tlb: &'a SoftTlb,
    cpu: usize,
    issued: AtomicU64,
}

#[cfg(feature = "std")]
impl<'a> PtcGa<'a> {
    /// Purges issued by `cpu` into `tlb`. Panics if `cpu` is out of range.
    pub fn new(tlb: &'a SoftTlb, cpu: usize) -> Self {
        let _ = tlb.on(cpu); // checks the cpu
        Self {
            tlb,
            cpu,
            issued: AtomicU64::new(0),
        }
    }

    /// `ptc.ga` instructions issued so far.
    pub fn ptc_ga_count(&self) -> u64 {
        self.issued.load(Ordering::Relaxed)
    }

    /// The issuing CPU.
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// The model purged.
    pub fn tlb(&self) -> &'a SoftTlb {
        self.tlb
    }

    /// One `ptc.ga` of `block`: one flush event in the model, charged per
    /// remote CPU.
    fn ptc_ga(&self, block: PurgeBlock, page_size: u64) {
        self.issued.fetch_add(1, Ordering::Relaxed);
        // Half-open end; region 7's whole-region block saturates at u64::MAX,
        // which still lies in (and so covers) the last page.
        let end = block.last().as_u64().saturating_add(1);
        self.tlb
            .on(self.cpu)
            .flush_range(block.base, VirtAddr::new(end), page_size);
    }
}

#[cfg(feature = "std")]
impl TlbFlush for PtcGa<'_> {
    /// One `ptc.ga` of one page.
    fn flush_page(&self, va: VirtAddr) {
        let page = self.tlb.page_size();
        let block = PurgeBlock {
            base: va.align_down(page),
            log2_size: page.trailing_zeros(),
        };
        self.ptc_ga(block, page);
    }

    /// IPIs and a local `ptc.e` loop on every CPU: the model's full flush,
    /// not a `ptc.ga`.
    fn flush_all(&self) {
        self.tlb.on(self.cpu).flush_all();
    }

    fn flush_ceiling_pages(&self) -> u64 {
        self.tlb.on(self.cpu).flush_ceiling_pages()
    }

    /// One `ptc.ga` on the smallest aligned block covering the range; a full
    /// flush when the range crosses a region boundary; nothing when empty.
    fn flush_range(&self, start: VirtAddr, end: VirtAddr, page_size: u64) {
        if end <= start {
            return;
        }
        match PurgeBlock::covering(start, end, page_size) {
            Some(block) => self.ptc_ga(block, page_size),
            None => self.flush_all(),
        }
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;

    fn va(raw: u64) -> VirtAddr {
        VirtAddr::new(raw)
    }

    const P: u64 = 16 * 1024;

    #[test]
    fn purge_blocks_by_hand() {
        let r5 = 0xa000_0000_0000_0000u64;
        // One aligned page.
        assert_eq!(
            PurgeBlock::covering(va(r5 + 3 * P), va(r5 + 4 * P), P),
            Some(PurgeBlock {
                base: va(r5 + 3 * P),
                log2_size: 14
            })
        );
        // Pages 1..3: first 0x4000, last 0xbfff differ in bit 15 -> 64 KiB at 0.
        let b = PurgeBlock::covering(va(r5 + P), va(r5 + 3 * P), P).unwrap();
        assert_eq!((b.base, b.log2_size, b.size()), (va(r5), 16, 64 * 1024));
        assert_eq!(b.last(), va(r5 + 0xffff));
        // Two pages straddling a 2^47 boundary: differ in bit 47 -> 2^48 block.
        let b =
            PurgeBlock::covering(va(0xa000_7fff_ffff_c000), va(0xa000_8000_0000_4000), P).unwrap();
        assert_eq!((b.base, b.log2_size), (va(r5), 48));
        // A minimum size rounds up to a power of two.
        let b = PurgeBlock::covering(va(r5), va(r5 + 1), 3 * P).unwrap();
        assert_eq!(b.log2_size, 16);
        // The whole of region 7: one region-wide block ending at u64::MAX.
        let b = PurgeBlock::covering(va(0xe000_0000_0000_0000), va(u64::MAX), P).unwrap();
        assert_eq!((b.log2_size, b.last()), (61, va(u64::MAX)));
        // Empty, or across regions: no single purge.
        assert_eq!(PurgeBlock::covering(va(r5), va(r5), P), None);
        assert_eq!(
            PurgeBlock::covering(va(r5 - P), va(r5 + P), P),
            None,
            "regions 4 and 5"
        );
    }

    #[cfg(feature = "std")]
    mod hosted {
        use super::*;
        use arch_api::TlbStats;

        const COST: CostModel = CostModel {
            page_flush_ns: 7,
            full_flush_ns: 500,
            ipi_ns: 100,
        };

        fn r5(page: u64) -> VirtAddr {
            va(0xa000_0000_0000_0000 + page * P)
        }

        #[test]
        fn range_purge_is_one_ptc_ga_charged_per_remote_cpu() {
            let tlb = SoftTlb::new(4, P, COST);
            for cpu in 0..4 {
                tlb.touch(cpu, r5(cpu as u64 + 1)); // pages 1..4, inside
            }
            tlb.touch(2, r5(9)); // outside the 8-page block
            let ptc = PtcGa::new(&tlb, 1);
            // Pages 1..5 (4 pages) round up to the aligned 8-page block 0..8.
            ptc.flush_range(r5(1), r5(5), P);
            assert_eq!(ptc.ptc_ga_count(), 1);
            assert_eq!(
                tlb.stats(),
                TlbStats {
                    flush_events: 1,
                    pages_flushed: 8,
                    full_flushes: 0,
                    ipis: 3,
                    cost_ns: 3 * 100 + 8 * 7,
                }
            );
            assert!(!tlb.may_hold(r5(0), r5(8)), "gone from every CPU");
            for cpu in [0, 1, 3] {
                assert_eq!(tlb.held(cpu), 0);
            }
            assert_eq!(tlb.holder(r5(0), r5(100)), Some((2, r5(9))));
        }

        #[test]
        fn charge_scales_with_remote_cpus() {
            for cpus in [1usize, 2, 8, 64] {
                let tlb = SoftTlb::new(cpus, P, COST);
                PtcGa::new(&tlb, cpus - 1).flush_page(r5(3));
                let s = tlb.stats();
                assert_eq!(s.ipis, cpus as u64 - 1);
                assert_eq!(s.cost_ns, (cpus as u64 - 1) * 100 + 7, "{cpus} cpus");
            }
        }

        #[test]
        fn flush_page_is_one_ptc_ga_of_one_page() {
            let tlb = SoftTlb::new(2, P, COST);
            tlb.touch(0, r5(3));
            tlb.touch(1, r5(4));
            let ptc = PtcGa::new(&tlb, 0);
            ptc.flush_page(VirtAddr::new(r5(3).as_u64() + 123));
            assert_eq!(ptc.ptc_ga_count(), 1);
            assert_eq!(tlb.stats().pages_flushed, 1);
            assert!(!tlb.may_hold(r5(3), r5(4)));
            assert!(tlb.may_hold(r5(4), r5(5)));
        }

        #[test]
        fn big_block_is_one_ptc_ga_recorded_as_a_full_flush() {
            let tlb = SoftTlb::new(3, P, COST);
            tlb.touch(1, r5(1000));
            let ptc = PtcGa::new(&tlb, 0);
            // The 2005 munmap's 16 TiB unmap, from the region base: one 2^44 block.
            let end = VirtAddr::new(r5(0).as_u64() + (1 << 44));
            ptc.flush_range(r5(0), end, P);
            assert_eq!(ptc.ptc_ga_count(), 1);
            let s = tlb.stats();
            assert_eq!((s.flush_events, s.full_flushes, s.ipis), (1, 1, 2));
            assert_eq!(s.cost_ns, 2 * 100 + 500);
            assert_eq!(tlb.held(1), 0);
        }

        #[test]
        fn full_and_cross_region_flushes_are_not_ptc_ga() {
            let tlb = SoftTlb::new(4, P, COST);
            let ptc = PtcGa::new(&tlb, 0);
            tlb.touch(3, r5(0));
            ptc.flush_all();
            let region4_top = VirtAddr::new(r5(0).as_u64() - P);
            tlb.touch(3, region4_top);
            ptc.flush_range(region4_top, r5(1), P);
            assert_eq!(ptc.ptc_ga_count(), 0);
            let s = tlb.stats();
            assert_eq!((s.flush_events, s.full_flushes, s.ipis), (2, 2, 6));
            assert_eq!(tlb.held(3), 0);
            // An empty range issues nothing at all.
            ptc.flush_range(r5(5), r5(5), P);
            assert_eq!(tlb.stats().flush_events, 2);
        }

        #[test]
        fn ia64_defaults() {
            assert_eq!(
                ia64_cost_model(),
                CostModel {
                    page_flush_ns: 100,
                    full_flush_ns: 3300,
                    ipi_ns: 1000,
                }
            );
            let tlb = ia64_soft_tlb(4);
            assert_eq!((tlb.cpus(), tlb.page_size()), (4, 16384));
            let ptc = PtcGa::new(&tlb, 3);
            assert_eq!((ptc.cpu(), ptc.flush_ceiling_pages()), (3, 33));
            assert!(core::ptr::eq(ptc.tlb(), &tlb));
        }

        #[test]
        #[should_panic(expected = "out of range")]
        fn issuing_cpu_must_exist() {
            let tlb = SoftTlb::new(2, P, COST);
            let _ = PtcGa::new(&tlb, 2);
        }
    }
}
