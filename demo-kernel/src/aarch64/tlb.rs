//! The kernel's TLB flusher: arch-aarch64's `Aarch64Tlb` (real `tlbi vae1is`
//! / `tlbi vmalle1is` with their barriers), wrapped to count every `TLBI` it
//! issues, for the report. The `no-shootdown` build wraps the local-only
//! flusher of `tlb_local.rs` instead, with the same counts.

use super::Layout;
use arch_aarch64::{RangeFlush, plan_range_flush};
use arch_api::{TlbFlush, VirtAddr};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// `tlbi vae1is` issued since boot.
static PAGE_OPS: AtomicU64 = AtomicU64::new(0);
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

/// (`tlbi vae1is`, full invalidations) issued since boot.
pub fn tlb_counts() -> (u64, u64) {
    (PAGE_OPS.load(Relaxed), FULL_OPS.load(Relaxed))
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
            RangeFlush::Pages { count, .. } => {
                PAGE_OPS.fetch_add(count, Relaxed);
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
        } else {
            PAGE_OPS.fetch_add(pages, Relaxed);
        }
        self.0.flush_ranges(ranges, page_size);
    }
}
