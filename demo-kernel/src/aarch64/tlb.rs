//! The kernel's TLB flusher: arch-aarch64's `Aarch64Tlb` (real `tlbi vae1is`
//! / `tlbi vmalle1is` with their barriers), wrapped to count every `TLBI` it
//! issues, for the report. Where the CPU has FEAT_TLBIRANGE (`tlb_range.rs`)
//! a range below the flush ceiling is invalidated with `tlbi rvae1is`, one
//! instruction per range (plus one `tlbi vae1is` for an odd first page),
//! instead of one per page; the ceiling and the plan (which pages, when a
//! full flush) are `Aarch64Tlb`'s either way, so the purges do the same
//! work on both paths. The `no-shootdown` build wraps the local-only
//! flusher of `tlb_local.rs` instead, with the same counts, per page.

use super::Layout;
use arch_aarch64::{RangeFlush, plan_range_flush};
use arch_api::{PageTableLayout, TlbFlush, VirtAddr};
use core::arch::asm;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Pages invalidated by VA since boot, each by its own `tlbi vae1is` or
/// inside a `tlbi rvae1is`.
static PAGE_OPS: AtomicU64 = AtomicU64::new(0);
/// TLBI-by-VA instructions issued since boot (`tlbi vae1is` and
/// `tlbi rvae1is`).
static VA_OPS: AtomicU64 = AtomicU64::new(0);
/// `tlbi rvae1is` issued since boot.
static RANGE_OPS: AtomicU64 = AtomicU64::new(0);
/// `tlbi vmalle1is` / `tlbi vmalle1` issued since boot.
static FULL_OPS: AtomicU64 = AtomicU64::new(0);

/// What issues the invalidations: the broadcast forms.
#[cfg(not(feature = "no-shootdown"))]
type Inner = arch_aarch64::Aarch64Tlb<Layout>;
/// What issues the invalidations: this CPU only (the broken build).
#[cfg(feature = "no-shootdown")]
type Inner = super::tlb_local::LocalTlb;

/// A counting `Aarch64Tlb` for the 4 KiB granule (Linux's 33-page ceiling).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tlb(Inner);

/// A flusher; all share the counters.
pub fn tlb() -> Tlb {
    Tlb(Inner::new())
}

/// (pages invalidated by VA, full invalidations) since boot.
pub fn tlb_counts() -> (u64, u64) {
    (PAGE_OPS.load(Relaxed), FULL_OPS.load(Relaxed))
}

/// Whether ranges go through `tlbi rvae1is` (FEAT_TLBIRANGE, and not the
/// `no-shootdown` build).
fn range_path() -> bool {
    !cfg!(feature = "no-shootdown") && super::tlb_range::supported()
}

/// How ranges are invalidated by VA (the report's `va_flush_path`), and
/// the (TLBI-by-VA instructions, `tlbi rvae1is` among them) since boot.
pub fn va_flush() -> (&'static str, u64, u64) {
    let path = if cfg!(feature = "no-shootdown") {
        "tlbi vae1 per page (no-shootdown build)"
    } else if range_path() {
        "tlbi rvae1is (FEAT_TLBIRANGE)"
    } else {
        "tlbi vae1is per page"
    };
    (path, VA_OPS.load(Relaxed), RANGE_OPS.load(Relaxed))
}

/// The ranges' pages, by `tlbi rvae1is` (one `dsb ishst` before, one
/// `dsb ish; isb` after, as `Aarch64Tlb` puts around its list).
fn flush_by_range(list: impl Iterator<Item = (u64, u64, u64)>) {
    // SAFETY: a barrier: the table stores before it reach the walkers
    // first (Arm ARM DDI 0487 M.a, D8.17.8 "Ordering and completion of TLB
    // maintenance instructions").
    unsafe { asm!("dsb ishst", options(nostack, preserves_flags)) };
    for (first, step, count) in list {
        let granules = count * (step / Layout::PAGE_SIZE);
        for op in super::tlb_range::plan(first, granules) {
            VA_OPS.fetch_add(1, Relaxed);
            if let super::tlb_range::Op::Range(..) = op {
                RANGE_OPS.fetch_add(1, Relaxed);
            }
            super::tlb_range::issue(op);
        }
        PAGE_OPS.fetch_add(count, Relaxed);
    }
    // SAFETY: barriers only: the invalidations completed on every CPU of
    // the Inner Shareable domain, and this CPU refetches.
    unsafe { asm!("dsb ish", "isb", options(nostack, preserves_flags)) };
}

/// Counts a full invalidation issued outside [`Tlb`] (the boot one).
pub(super) fn count_full() {
    FULL_OPS.fetch_add(1, Relaxed);
}

impl TlbFlush for Tlb {
    fn sync_new_entries(&self) {
        self.0.sync_new_entries();
    }

    fn flush_page(&self, va: VirtAddr) {
        PAGE_OPS.fetch_add(1, Relaxed);
        VA_OPS.fetch_add(1, Relaxed);
        self.0.flush_page(va);
    }

    fn flush_all(&self) {
        FULL_OPS.fetch_add(1, Relaxed);
        self.0.flush_all();
    }

    fn flush_ceiling_pages(&self) -> u64 {
        self.0.flush_ceiling_pages()
    }

    fn flush_range(&self, start: VirtAddr, end: VirtAddr, page_size: u64) {
        // The same plan `Aarch64Tlb::flush_range` follows, so the counts are
        // the instructions it is about to issue.
        match plan_range_flush::<Layout>(start, end, page_size, self.flush_ceiling_pages()) {
            RangeFlush::Nothing => {}
            RangeFlush::All => {
                FULL_OPS.fetch_add(1, Relaxed);
            }
            RangeFlush::Pages { first, step, count } if range_path() => {
                return flush_by_range(core::iter::once((first.as_u64(), step, count)));
            }
            RangeFlush::Pages { count, .. } => {
                PAGE_OPS.fetch_add(count, Relaxed);
                VA_OPS.fetch_add(count, Relaxed);
            }
        }
        self.0.flush_range(start, end, page_size);
    }

    /// Forwarded, so the gather's flush lists reach
    /// `Aarch64Tlb::flush_ranges` (barriers once around the list) and are
    /// counted by the same plan.
    fn flush_ranges(&self, ranges: &[(VirtAddr, VirtAddr)], page_size: u64) {
        let pages = ranges
            .iter()
            .map(
                |&(s, e)| match plan_range_flush::<Layout>(s, e, page_size, u64::MAX) {
                    RangeFlush::Pages { count, .. } => count,
                    _ => 0,
                },
            )
            .fold(0u64, u64::saturating_add);
        if pages > self.flush_ceiling_pages() {
            FULL_OPS.fetch_add(1, Relaxed);
        } else if pages > 0 && range_path() {
            return flush_by_range(ranges.iter().filter_map(|&(s, e)| {
                match plan_range_flush::<Layout>(s, e, page_size, u64::MAX) {
                    RangeFlush::Pages { first, step, count } => Some((first.as_u64(), step, count)),
                    _ => None,
                }
            }));
        } else {
            PAGE_OPS.fetch_add(pages, Relaxed);
            VA_OPS.fetch_add(pages, Relaxed);
        }
        self.0.flush_ranges(ranges, page_size);
    }
}
