//! The TLB gather (Linux's `mmu_gather`): what a zap must not free before the
//! TLB has forgotten it.
//!
//! Clearing an entry does not stop other CPUs from using a translation they
//! cached, nor the MMU from walking a table it already reached. So the walker
//! clears entries, records the frames and table pages here, and only when a
//! batch ends (the buffer is full, the budget forces a lock break, or the zap
//! is done) does the gather flush the range it touched, once, through
//! [`TlbFlush::flush_range`] (which turns a range above the flush ceiling
//! into a full flush), and then the walker frees the batch. Order: clear
//! entries, flush, free — never free before the flush.

use arch_api::{PhysAddr, TlbFlush, VirtAddr};
use arrayvec::ArrayVec;

/// Default batch capacity: about one page of records, as Linux's
/// `MAX_GATHER_BATCH` is one page of pointers.
pub const DEFAULT_BATCH: usize = 256;

/// What a batched record frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FreedKind {
    /// A mapped frame (a page, or a whole large-leaf block).
    Frame,
    /// A page-table page of this level.
    Table(u8),
}

/// One batched record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Freed {
    pub(crate) addr: PhysAddr,
    pub(crate) size: u64,
    pub(crate) kind: FreedKind,
}

/// Counters of a [`Gather`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatherStats {
    /// Batches finished (each flushes at most once).
    pub batches: u64,
    /// Range flushes issued at the end of a batch.
    pub flushes: u64,
    /// Of those, how many were above the flush ceiling (full flushes).
    pub full_flushes: u64,
    /// Extra flushes for break-before-make when a large leaf was split.
    pub split_flushes: u64,
    /// Frames returned to the frame source (a large leaf counts once).
    pub frames_freed: u64,
    /// Bytes of those frames.
    pub frame_bytes_freed: u64,
    /// Table pages released.
    pub tables_freed: u64,
}

/// A TLB gather over the flusher `T`, batching up to `N` frees.
#[derive(Debug)]
pub struct Gather<T: TlbFlush, const N: usize = DEFAULT_BATCH> {
    tlb: T,
    pub(crate) batch: ArrayVec<Freed, N>,
    /// First address touched since the last flush; `u64::MAX` when none.
    start: u64,
    /// Last address (inclusive) touched since the last flush.
    last: u64,
    freed_tables: bool,
    pub(crate) stats: GatherStats,
}

impl<T: TlbFlush, const N: usize> Gather<T, N> {
    /// An empty gather flushing through `tlb`.
    pub fn new(tlb: T) -> Self {
        const { assert!(N > 0, "a gather needs room for at least one record") };
        Self {
            tlb,
            batch: ArrayVec::new(),
            start: u64::MAX,
            last: 0,
            freed_tables: false,
            stats: GatherStats::default(),
        }
    }

    /// The flusher.
    pub fn tlb(&self) -> &T {
        &self.tlb
    }

    /// The counters so far.
    pub fn stats(&self) -> GatherStats {
        self.stats
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) {
        self.stats = GatherStats::default();
    }

    /// Whether nothing is pending (no record, no range to flush).
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.start == u64::MAX
    }

    /// The range touched since the last flush, `[start, last]` inclusive.
    pub fn pending_range(&self) -> Option<(VirtAddr, VirtAddr)> {
        (self.start != u64::MAX).then(|| (VirtAddr::new(self.start), VirtAddr::new(self.last)))
    }

    /// Whether a table page is waiting in this batch.
    pub fn freed_tables(&self) -> bool {
        self.freed_tables
    }

    /// The flusher back.
    pub fn into_inner(self) -> T {
        self.tlb
    }

    /// Records that `[start, last]` had translations removed.
    pub(crate) fn note_range(&mut self, start: u64, last: u64) {
        self.start = self.start.min(start);
        self.last = self.last.max(last);
    }

    /// Records that a table translating `[first, last]` was unlinked, with
    /// `at`, a page inside that span, as the fallback: the flush must
    /// invalidate at least one address the table translated (that drops the
    /// cached walks through it, see `flush`). If the range touched already
    /// meets the span, its flush does so and nothing widens; otherwise the
    /// page of the span nearest that range is added (or `at` if none).
    pub(crate) fn note_table(&mut self, first: u64, last: u64, at: u64, page_size: u64) {
        let page = if self.start == u64::MAX {
            at
        } else if self.start <= last && first <= self.last {
            return;
        } else if self.last < first {
            first
        } else {
            last & !(page_size - 1)
        };
        self.note_range(page, page + (page_size - 1));
    }

    /// Queues a record; gives it back when the batch is full.
    pub(crate) fn push(&mut self, f: Freed) -> Result<(), Freed> {
        if matches!(f.kind, FreedKind::Table(_)) {
            self.freed_tables = true;
        }
        self.batch.try_push(f).map_err(|e| e.element())
    }

    /// Flushes the range touched, once, if any. A table page freed in this
    /// batch had one page of its span noted when it was unlinked (as Linux's
    /// `pte_free_tlb`), so the same invalidation drops cached walks through
    /// it: backends must invalidate non-leaf walk entries too (arm64 uses
    /// `tlbi vae1is`, not `vale1is`; x86 `invlpg` always does).
    pub(crate) fn flush(&mut self, page_size: u64) {
        if self.start != u64::MAX {
            let end = self.last.saturating_add(1);
            let pages = (end - self.start).div_ceil(page_size);
            if pages > self.tlb.flush_ceiling_pages() {
                self.stats.full_flushes += 1;
            }
            self.tlb
                .flush_range(VirtAddr::new(self.start), VirtAddr::new(end), page_size);
            self.stats.flushes += 1;
        }
        self.start = u64::MAX;
        self.last = 0;
        self.freed_tables = false;
    }

    /// An immediate flush of `[start, last]` (break-before-make on a split).
    pub(crate) fn flush_now(&mut self, start: u64, last: u64, page_size: u64) {
        self.tlb.flush_range(
            VirtAddr::new(start),
            VirtAddr::new(last.saturating_add(1)),
            page_size,
        );
        self.stats.split_flushes += 1;
    }
}
