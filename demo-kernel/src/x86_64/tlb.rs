//! The kernel's [`TlbFlush`]: `arch_x86_64::X86Tlb` — real `invlpg` and
//! global-inclusive full flushes (INVPCID when the CPU has it, otherwise the
//! CR4.PGE toggle, since the kernel map is global) — counting what it issues.
//!
//! The shootdown hook (`shootdown.rs`) carries each flush to the other
//! online CPUs; the counters count this CPU's instructions only. They mirror `X86Tlb`'s own
//! decisions: a page flush is one `invlpg`; a range is `invlpg` per page up
//! to the 33-page ceiling, one full flush beyond it.

use arch_api::{TlbFlush, VirtAddr};
use arch_x86_64::X86Tlb;
use arch_x86_64::tlb::FullFlush;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static INVLPG: AtomicU64 = AtomicU64::new(0);
static FULL: AtomicU64 = AtomicU64::new(0);

/// The probed `X86Tlb` (CPUID once, at boot).
struct Probed(UnsafeCell<Option<X86Tlb>>);

// SAFETY: written once by `init` on the one CPU before any reader exists
// (`READY` then published with release); read-only afterwards.
unsafe impl Sync for Probed {}

static PROBED: Probed = Probed(UnsafeCell::new(None));
static READY: AtomicBool = AtomicBool::new(false);

/// Probes the CPU. Boot only, before [`tlb`].
pub fn init() {
    // The hook makes every flush reach the other online CPUs
    // (`shootdown.rs`); with one CPU online it returns at once.
    // SAFETY: every CPU runs the kernel at CPL 0 in long mode and owns its
    // CR3/CR4 (`X86Tlb::new`'s contract). The only CR4 writers are
    // `X86Tlb`'s full flush, whose read-modify-write runs with IF clear, and
    // boot code before interrupts are on, so no handler's CR4 write is lost
    // (the shootdown handler flushes through `X86Tlb` too). Boot CPU, before
    // any reader.
    let tlb = unsafe { X86Tlb::new() };
    // The broken build (`no-shootdown`) leaves the hook out: every flush
    // stays on the executing CPU (SDM Vol. 3A §4.10.5, see `shootdown.rs`),
    // which smp-loop's cross-CPU stale check must catch.
    #[cfg(not(feature = "no-shootdown"))]
    let tlb = tlb.with_shootdown(super::shootdown::shoot);
    // Still built (so both builds compile the same code), never installed.
    #[cfg(feature = "no-shootdown")]
    let _: fn(&arch_x86_64::tlb::Shootdown) = super::shootdown::shoot;
    // SAFETY: boot CPU, before any reader (`READY` is not yet set).
    unsafe { *PROBED.0.get() = Some(tlb) };
    READY.store(true, Ordering::Release);
}

/// `invlpg` and full flushes on this CPU, counted.
#[derive(Clone, Copy, Debug)]
pub struct Tlb(X86Tlb);

/// A flusher sharing the global counters.
pub fn tlb() -> Tlb {
    Tlb(uncounted())
}

/// The probed `X86Tlb` itself, whose flushes are not counted: for the boot
/// self-test (`tlb_check.rs`), which is not a workload.
pub fn uncounted() -> X86Tlb {
    assert!(READY.load(Ordering::Acquire), "tlb() before boot probed it");
    // SAFETY: `init` finished (READY), so the cell is never written again.
    unsafe { *PROBED.0.get() }.expect("probed at boot")
}

impl Tlb {
    /// How a full flush is done right now (INVPCID, CR4.PGE toggle, CR3).
    pub fn full_flush_method(&self) -> FullFlush {
        self.0.full_flush_method()
    }
}

/// (`invlpg` issued, full flushes issued) since boot.
pub fn counts() -> (u64, u64) {
    (INVLPG.load(Ordering::Relaxed), FULL.load(Ordering::Relaxed))
}

impl TlbFlush for Tlb {
    fn flush_page(&self, va: VirtAddr) {
        INVLPG.fetch_add(1, Ordering::Relaxed);
        self.0.flush_page(va);
    }

    fn flush_all(&self) {
        FULL.fetch_add(1, Ordering::Relaxed);
        self.0.flush_all();
    }

    fn flush_ceiling_pages(&self) -> u64 {
        self.0.flush_ceiling_pages()
    }

    fn flush_range(&self, start: VirtAddr, end: VirtAddr, page_size: u64) {
        if end > start {
            let first = start.align_down(page_size).as_u64();
            let pages = (end.as_u64() - first).div_ceil(page_size);
            if pages > self.0.flush_ceiling_pages() {
                FULL.fetch_add(1, Ordering::Relaxed);
            } else {
                INVLPG.fetch_add(pages, Ordering::Relaxed);
            }
        }
        self.0.flush_range(start, end, page_size);
    }

    /// Forwarded, so the gather's flush lists reach `X86Tlb::flush_ranges`
    /// (one `Shootdown::Ranges` per list) and are counted as it issues them.
    fn flush_ranges(&self, ranges: &[(VirtAddr, VirtAddr)], page_size: u64) {
        match arch_api::range_list_pages(ranges, page_size) {
            0 => {}
            p if p > self.0.flush_ceiling_pages() => {
                FULL.fetch_add(1, Ordering::Relaxed);
            }
            p => {
                INVLPG.fetch_add(p, Ordering::Relaxed);
            }
        }
        self.0.flush_ranges(ranges, page_size);
    }
}
