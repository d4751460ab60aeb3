//! The TLB gather (Linux's `mmu_gather`): what a zap must not free before the
//! TLB has forgotten it.
//!
//! Clearing an entry does not stop other CPUs from using a translation they
//! cached, nor the MMU from walking a table it already reached. So the walker
//! clears entries, records the frames and table pages here, and only when a
//! batch ends (the buffer is full, the budget forces a lock break, or the zap
//! is done) does the gather flush what it touched, once, and then the
//! walker hands the batch on: table pages to itself (its stock or its frame
//! source), frames to the gather's [`FrameSink`]. The default sink,
//! [`FreeToSource`], returns them to the walker's frame source in one
//! [`FrameSource::free_many`] call (one lock round trip, as Linux's
//! `release_pages`): the walker owns what it mapped. A caller who lent the
//! frames (vmalloc's `vunmap` of the caller's pages) passes [`Lent`] or a
//! sink of its own, for that one zap: who owns a frame is decided by the
//! call, not by a mode of the frame source. Order: clear entries, flush,
//! hand on — never before the flush.
//!
//! A gather may chain batch pages (Linux's `tlb_next_batch`): when the
//! fixed batch fills, further records go to pages taken from the walker's
//! frame source, up to [`Gather::with_chain`]'s limit, so that one flush
//! covers everything a zap cleared between two lock breaks rather than one
//! flush per fixed batch. A page the source refuses, or a full chain, ends
//! the batch as without chaining; the pages go back to the source when the
//! batch is handed on.
//!
//! What it touched is kept as up to [`FLUSH_RANGES`] disjoint ranges rather
//! than one `[min, max]`: a zap whose few pages lie far apart (a sparse
//! mapping, the sparse map + unmap of 1 TiB that took 1.69 s on ppc64
//! before the 2005 fix) then invalidates those pages through
//! [`TlbFlush::flush_ranges`] in one shootdown instead of everything between
//! them; past the flush ceiling it is a full flush either way.
//!
//! [`FrameSource::free_many`]: arch_api::FrameSource::free_many

use crate::sync::atomic::AtomicU64;
use arch_api::{PhysAddr, TlbFlush, VirtAddr, range_list_pages};
use arrayvec::ArrayVec;

/// Default batch capacity: about one page of records, as Linux's
/// `MAX_GATHER_BATCH` is one page of pointers.
pub const DEFAULT_BATCH: usize = 256;

/// Disjoint ranges a gather tracks before merging the nearest two (a
/// preemptible zap's 8-page batch of scattered pages fits).
pub const FLUSH_RANGES: usize = 8;

/// The most batch pages a gather chains (each holds a granule's worth of
/// 16-byte records: 256 with 4 KiB frames). Linux bounds the same chain with
/// `MAX_GATHER_BATCH_COUNT` so that one flush does not hold too much.
pub const MAX_CHAIN_PAGES: usize = 16;

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

impl Freed {
    /// The record as two words, as it is kept in a chained batch page:
    /// the address, then the size above 8 bits of kind (0: a frame, 1 +
    /// level: a table page). Sizes are below 2^56 on every layout.
    #[inline]
    pub(crate) fn to_words(self) -> [u64; 2] {
        let kind = match self.kind {
            FreedKind::Frame => 0,
            FreedKind::Table(level) => 1 + level as u64,
        };
        [self.addr.as_u64(), self.size << 8 | kind]
    }

    /// The record [`to_words`](Self::to_words) wrote.
    #[inline]
    pub(crate) fn from_words(w: [u64; 2]) -> Self {
        let kind = match w[1] & 0xff {
            0 => FreedKind::Frame,
            k => FreedKind::Table((k - 1) as u8),
        };
        Freed {
            addr: PhysAddr::new(w[0]),
            size: w[1] >> 8,
            kind,
        }
    }
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
    /// Frames handed on, to the frame source or the sink (a large leaf
    /// counts once).
    pub frames_freed: u64,
    /// Bytes of those frames.
    pub frame_bytes_freed: u64,
    /// Table pages released.
    pub tables_freed: u64,
    /// Batch pages chained past the fixed batch (see [`Gather::with_chain`]).
    pub chained_pages: u64,
}

/// Where a zap's frames go once their batch is flushed (see the module
/// docs).
pub trait FrameSink {
    /// The frames go back to the walker's frame source, which `take` is
    /// then never called for (the walker batches them into
    /// [`FrameSource::free_many`](arch_api::FrameSource::free_many)).
    const TO_SOURCE: bool = false;

    /// Takes `frames` (address and bytes of each: a page, or a whole
    /// large-leaf block) that a zap unmapped, after the flush of their
    /// batch. They are the sink's from now on.
    fn take(&mut self, frames: &[(PhysAddr, u64)]);
}

/// The default [`FrameSink`]: frames go back to the walker's frame source.
#[derive(Clone, Copy, Debug, Default)]
pub struct FreeToSource;

impl FrameSink for FreeToSource {
    const TO_SOURCE: bool = true;
    fn take(&mut self, _frames: &[(PhysAddr, u64)]) {}
}

/// A [`FrameSink`] for frames that were lent (mapped from pages the caller
/// keeps owning, as `vmap` does): they stay the lender's, nothing is freed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lent;

impl FrameSink for Lent {
    fn take(&mut self, _frames: &[(PhysAddr, u64)]) {}
}

/// Any closure taking the frames of each flushed batch is a sink.
impl<F: FnMut(&[(PhysAddr, u64)])> FrameSink for F {
    fn take(&mut self, frames: &[(PhysAddr, u64)]) {
        self(frames)
    }
}

/// A TLB gather over the flusher `T`, batching up to `N` frees, handing
/// the frames it unmaps to the sink `S`.
#[derive(Debug)]
pub struct Gather<T: TlbFlush, const N: usize = DEFAULT_BATCH, S: FrameSink = FreeToSource> {
    tlb: T,
    pub(crate) sink: S,
    pub(crate) batch: ArrayVec<Freed, N>,
    /// Chained batch pages, in order (see the module docs).
    pub(crate) chain: ArrayVec<PhysAddr, MAX_CHAIN_PAGES>,
    /// The words of the last chained page (null while none is chained):
    /// kept so that a record past the fixed batch costs two stores.
    pub(crate) chain_words: *const AtomicU64,
    /// Records written in the last chained page.
    pub(crate) chain_next: usize,
    /// Records the last chained page holds (0 while none is chained).
    pub(crate) chain_end: usize,
    /// Pages this gather may chain.
    pub(crate) chain_max: usize,
    /// Ranges touched since the last flush, `[first, last]` inclusive,
    /// sorted, disjoint and not adjacent.
    ranges: ArrayVec<(u64, u64), FLUSH_RANGES>,
    freed_tables: bool,
    /// Whether a lock break may leave the batch open (see
    /// [`Gather::across_breaks`]).
    pub(crate) across_breaks: bool,
    /// A table page whose span reaches outside the zap's range waits in
    /// this batch: the next lock break must end it.
    pub(crate) outside_table: bool,
    pub(crate) stats: GatherStats,
}

// SAFETY: `chain_words` points into a chained page that this gather alone
// holds (taken from the walker's frame source, written and read only by
// the walker through `&mut` to the gather); the pointer is one of the
// gather's fields like the records, so moving the gather to another
// thread moves that memory's only user with it.
unsafe impl<T: TlbFlush + Send, const N: usize, S: FrameSink + Send> Send for Gather<T, N, S> {}
// SAFETY: `&Gather` reads no chained page (only `&mut` methods touch them).
unsafe impl<T: TlbFlush + Sync, const N: usize, S: FrameSink + Sync> Sync for Gather<T, N, S> {}

impl<T: TlbFlush, const N: usize> Gather<T, N> {
    /// An empty gather flushing through `tlb`, returning frames to the
    /// walker's frame source.
    pub fn new(tlb: T) -> Self {
        Gather::with_sink(tlb, FreeToSource)
    }
}

impl<T: TlbFlush, const N: usize, S: FrameSink> Gather<T, N, S> {
    /// An empty gather flushing through `tlb`, handing the frames it
    /// unmaps to `sink`.
    pub fn with_sink(tlb: T, sink: S) -> Self {
        const { assert!(N > 0, "a gather needs room for at least one record") };
        Self {
            tlb,
            sink,
            batch: ArrayVec::new(),
            chain: ArrayVec::new(),
            chain_words: core::ptr::null(),
            chain_next: 0,
            chain_end: 0,
            chain_max: 0,
            ranges: ArrayVec::new(),
            freed_tables: false,
            across_breaks: false,
            outside_table: false,
            stats: GatherStats::default(),
        }
    }

    /// The same gather, chaining up to `pages` batch pages (at most
    /// [`MAX_CHAIN_PAGES`]) from the walker's frame source before a full
    /// batch must be flushed: a dense zap then flushes once per lock break
    /// (per budget) instead of once per `N` records. The pages are taken
    /// while the zap runs (under the caller's page-table lock), only once
    /// the fixed batch is full, and go back when the batch is handed on;
    /// a source that refuses one costs a flush, nothing else. Off (0) by
    /// default.
    ///
    /// ```
    /// use zap_walker::{Gather, MAX_CHAIN_PAGES};
    /// # use zap_walker::{TlbFlush, VirtAddr};
    /// # struct NoTlb;
    /// # impl TlbFlush for NoTlb {
    /// #     fn flush_page(&self, _: VirtAddr) {}
    /// #     fn flush_all(&self) {}
    /// # }
    /// let g: Gather<NoTlb> = Gather::new(NoTlb).with_chain(MAX_CHAIN_PAGES);
    /// assert_eq!(g.chain_pages(), MAX_CHAIN_PAGES);
    /// ```
    pub fn with_chain(mut self, pages: usize) -> Self {
        self.chain_max = pages.min(MAX_CHAIN_PAGES);
        self
    }

    /// The same gather, keeping its batch open across a zap's lock breaks
    /// (Linux's `mmu_gather`, which `cond_resched` does not flush): the
    /// batch ends when it is full (with [`with_chain`](Self::with_chain),
    /// its chain too), when the zap is done, or at the first lock break
    /// after a table page whose span reaches outside the zap's range was
    /// unlinked. A dense zap then flushes once per full chain, not once
    /// per budget. Nothing is freed before the flush that covers it, as
    /// always; what waits is held a little longer (at most the batch and
    /// its chain).
    ///
    /// The caller promises that nothing maps into the zap's range until
    /// `zap_range` returns, lock breaks included (the range is being
    /// unmapped: a `vunmap`, an `munmap` under the OS's address-space
    /// lock). Then a translation that other CPUs still cache for a cleared
    /// page, or a walk they cache through a table unlinked inside the
    /// range, can only serve accesses to the range, which reach frames and
    /// tables the gather still holds. A table whose span reaches outside
    /// the range could be replaced there by another mapping during the
    /// break, so it is flushed before the break, as without this option.
    ///
    /// ```
    /// use zap_walker::{Gather, MAX_CHAIN_PAGES};
    /// # use zap_walker::{TlbFlush, VirtAddr};
    /// # struct NoTlb;
    /// # impl TlbFlush for NoTlb {
    /// #     fn flush_page(&self, _: VirtAddr) {}
    /// #     fn flush_all(&self) {}
    /// # }
    /// let g: Gather<NoTlb> = Gather::new(NoTlb)
    ///     .with_chain(MAX_CHAIN_PAGES)
    ///     .across_breaks();
    /// assert!(g.keeps_across_breaks());
    /// ```
    pub fn across_breaks(mut self) -> Self {
        self.across_breaks = true;
        self
    }

    /// Whether a lock break may leave the batch open
    /// ([`across_breaks`](Self::across_breaks)).
    pub fn keeps_across_breaks(&self) -> bool {
        self.across_breaks
    }

    /// Whether a lock break must end the batch now.
    #[inline]
    pub(crate) fn ends_at_break(&self) -> bool {
        !self.across_breaks || self.outside_table
    }

    /// Batch pages this gather may chain.
    pub fn chain_pages(&self) -> usize {
        self.chain_max
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
        self.batch.is_empty() && self.ranges.is_empty()
    }

    /// The span of everything touched since the last flush, `[first, last]`
    /// inclusive (the flush itself covers only [`pending_ranges`]).
    ///
    /// [`pending_ranges`]: Self::pending_ranges
    pub fn pending_range(&self) -> Option<(VirtAddr, VirtAddr)> {
        let (first, last) = (self.ranges.first()?, self.ranges.last()?);
        Some((VirtAddr::new(first.0), VirtAddr::new(last.1)))
    }

    /// The ranges the next flush will invalidate, `[first, last]` inclusive,
    /// in address order.
    pub fn pending_ranges(&self) -> impl Iterator<Item = (VirtAddr, VirtAddr)> + '_ {
        self.ranges
            .iter()
            .map(|&(f, l)| (VirtAddr::new(f), VirtAddr::new(l)))
    }

    /// Whether a table page is waiting in this batch.
    pub fn freed_tables(&self) -> bool {
        self.freed_tables
    }

    /// The flusher back.
    pub fn into_inner(self) -> T {
        self.tlb
    }

    /// The sink.
    pub fn sink(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Records that `[start, last]` had translations removed.
    #[inline]
    pub(crate) fn note_range(&mut self, start: u64, last: u64) {
        // The common case, a walk going up in address order: the new range
        // meets or follows the last one.
        let full = self.ranges.is_full();
        match self.ranges.last_mut() {
            Some(top) if start >= top.0 && start <= top.1.saturating_add(1) => {
                top.1 = top.1.max(last);
            }
            // Further up, with room: a new last range.
            Some(top) if start > top.1 && !full => {
                self.ranges.push((start, last));
            }
            None => self.ranges.push((start, last)),
            Some(_) => self.insert_range(start, last),
        }
    }

    /// Inserts `[start, last]` in order, merging whatever it meets or
    /// touches; when the list is full, merges the two ranges closest to
    /// each other (their union is flushed, a superset, which is safe).
    fn insert_range(&mut self, mut start: u64, mut last: u64) {
        let r = &mut self.ranges;
        // Ranges entirely below: end before start - 1.
        let lo = r
            .iter()
            .take_while(|x| x.1.saturating_add(1) < start)
            .count();
        // Ranges met or touched: start at most last + 1.
        let hi = lo
            + r[lo..]
                .iter()
                .take_while(|x| x.0 <= last.saturating_add(1))
                .count();
        if hi > lo {
            start = start.min(r[lo].0);
            last = last.max(r[hi - 1].1);
            r.drain(lo + 1..hi);
            r[lo] = (start, last);
            return;
        }
        if r.is_full() {
            let i = (0..r.len() - 1)
                .min_by_key(|&i| r[i + 1].0 - r[i].1)
                .unwrap_or(0);
            r[i].1 = r[i + 1].1;
            r.remove(i + 1);
            // The merge may have moved the slot the new range belongs in.
            return self.insert_range(start, last);
        }
        r.insert(lo, (start, last));
    }

    /// Records that a table translating `[first, last]` was unlinked, with
    /// `at`, a page inside that span, as the fallback: the flush must
    /// invalidate at least one address the table translated (that drops the
    /// cached walks through it, see `flush`). If a range touched already
    /// meets the span, its flush does so and nothing is added; otherwise the
    /// page of the span nearest a touched range is added (`at` if none), so
    /// that it joins that range when they are adjacent.
    #[inline(always)]
    pub(crate) fn note_table(&mut self, first: u64, last: u64, at: u64, page_size: u64) {
        // Usually the last range noted lies in the span: the table is
        // unlinked on the way back up from the leaves just cleared in it.
        // That test is inline in the zap; the search is not.
        match self.ranges.last() {
            Some(&(s, l)) if s <= last && first <= l => {}
            _ => self.note_table_slow(first, last, at, page_size),
        }
    }

    /// [`note_table`](Self::note_table) when the last range does not name
    /// the table.
    #[cold]
    #[inline(never)]
    fn note_table_slow(&mut self, first: u64, last: u64, at: u64, page_size: u64) {
        if self.ranges.is_empty() {
            return self.note_range(at, at + (page_size - 1));
        }
        let mut page = at;
        let mut gap = u64::MAX;
        for &(s, l) in &self.ranges {
            if s <= last && first <= l {
                return;
            }
            let (g, p) = if l < first {
                (first - l, first)
            } else {
                (s - last, last & !(page_size - 1))
            };
            if g < gap {
                (gap, page) = (g, p);
            }
        }
        self.note_range(page, page + (page_size - 1));
    }

    /// Queues a record; gives it back when the batch is full.
    pub(crate) fn push(&mut self, f: Freed) -> Result<(), Freed> {
        if matches!(f.kind, FreedKind::Table(_)) {
            self.freed_tables = true;
        }
        self.batch.try_push(f).map_err(|e| e.element())
    }

    /// Flushes what was touched, once, if anything. A table page freed in
    /// this batch had one page of its span noted when it was unlinked (as
    /// Linux's `pte_free_tlb`), so the same invalidation drops cached walks
    /// through it: backends must invalidate non-leaf walk entries too (arm64
    /// uses `tlbi vae1is`, not `vale1is`; x86 `invlpg` always does).
    pub(crate) fn flush(&mut self, page_size: u64) {
        if !self.ranges.is_empty() {
            let mut list = [(VirtAddr::new(0), VirtAddr::new(0)); FLUSH_RANGES];
            for (d, &(s, l)) in list.iter_mut().zip(&self.ranges) {
                *d = (VirtAddr::new(s), VirtAddr::new(l.saturating_add(1)));
            }
            let list = &list[..self.ranges.len()];
            if range_list_pages(list, page_size) > self.tlb.flush_ceiling_pages() {
                self.stats.full_flushes += 1;
            }
            // One range or several: `flush_ranges` of one range is that
            // range's `flush_range` (or a full flush past the ceiling).
            self.tlb.flush_ranges(list, page_size);
            self.stats.flushes += 1;
        }
        self.ranges.clear();
        self.freed_tables = false;
        self.outside_table = false;
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

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::RefCell;
    use std::vec::Vec;

    /// Records each flush call: `Some(list)` for a page-range list, `None`
    /// for a full flush.
    /// `[start, end)` ranges of one flush call.
    type Flushed = Vec<(u64, u64)>;

    #[derive(Default)]
    struct Rec(RefCell<Vec<Option<Flushed>>>);

    impl TlbFlush for &Rec {
        fn flush_page(&self, va: VirtAddr) {
            let v = va.as_u64();
            self.0.borrow_mut().push(Some(std::vec![(v, v + 0x1000)]));
        }
        fn flush_all(&self) {
            self.0.borrow_mut().push(None);
        }
        fn flush_range(&self, s: VirtAddr, e: VirtAddr, _ps: u64) {
            self.0
                .borrow_mut()
                .push(Some(std::vec![(s.as_u64(), e.as_u64())]));
        }
        fn flush_ranges(&self, r: &[(VirtAddr, VirtAddr)], ps: u64) {
            if range_list_pages(r, ps) > self.flush_ceiling_pages() {
                return self.flush_all();
            }
            let l = r.iter().map(|(s, e)| (s.as_u64(), e.as_u64())).collect();
            self.0.borrow_mut().push(Some(l));
        }
    }

    const P: u64 = 0x1000;

    fn page(g: &mut Gather<&Rec, 4>, n: u64) {
        g.note_range(n * P, n * P + P - 1);
    }

    fn ranges(g: &Gather<&Rec, 4>) -> Vec<(u64, u64)> {
        g.pending_ranges()
            .map(|(s, l)| (s.as_u64(), l.as_u64()))
            .collect()
    }

    #[test]
    fn adjacent_and_overlapping_ranges_merge_far_ones_stay_apart() {
        let rec = Rec::default();
        let mut g: Gather<&Rec, 4> = Gather::new(&rec);
        page(&mut g, 5);
        page(&mut g, 6); // adjacent: one range
        page(&mut g, 1 << 20);
        page(&mut g, 2); // below: inserted in order
        g.note_range(3 * P, 5 * P - 1); // fills the gap 3..4: merges 2..6
        assert_eq!(
            ranges(&g),
            [(2 * P, 7 * P - 1), (1 << 32, (1 << 32) + P - 1)]
        );
        assert_eq!(
            g.pending_range().map(|(s, l)| (s.as_u64(), l.as_u64())),
            Some((2 * P, (1 << 32) + P - 1))
        );
        g.flush(P);
        assert_eq!(
            *rec.0.borrow(),
            [Some(std::vec![(2 * P, 7 * P), (1 << 32, (1 << 32) + P)])]
        );
        assert!(g.is_empty() && g.pending_range().is_none());
        assert_eq!((g.stats().flushes, g.stats().full_flushes), (1, 0));
    }

    #[test]
    fn a_full_list_merges_the_two_closest_ranges() {
        let rec = Rec::default();
        let mut g: Gather<&Rec, 4> = Gather::new(&rec);
        let far = [0u64, 100, 1000, 10_000, 20_000, 30_000, 40_000, 50_000];
        assert_eq!(far.len(), FLUSH_RANGES);
        for n in far {
            page(&mut g, n);
        }
        // Eight single pages a list can carry: eight page flushes.
        assert_eq!(ranges(&g).len(), FLUSH_RANGES);
        page(&mut g, 103); // one more: 0 and 100 are the closest pair
        let r = ranges(&g);
        assert_eq!(r.len(), FLUSH_RANGES);
        assert_eq!(
            &r[..3],
            [
                (0, 101 * P - 1),
                (103 * P, 104 * P - 1),
                (1000 * P, 1001 * P - 1)
            ]
        );
        assert_eq!(r[7], (50_000 * P, 50_001 * P - 1));
        // 101 + 7 pages: above the ceiling, so one full flush.
        g.flush(P);
        assert_eq!(*rec.0.borrow(), [None]);
        assert_eq!(g.stats().full_flushes, 1);
        // Eight far pages alone fit under the ceiling: one list of eight.
        for n in far {
            page(&mut g, n);
        }
        g.flush(P);
        let last = rec.0.borrow().last().cloned().flatten().unwrap();
        assert_eq!(last.len(), 8);
        assert_eq!(last[1], (100 * P, 101 * P));
    }

    #[test]
    fn a_table_is_named_by_a_touched_range_or_its_nearest_page() {
        let rec = Rec::default();
        let mut g: Gather<&Rec, 4> = Gather::new(&rec);
        // Nothing touched: the fallback page.
        g.note_table(0, 512 * P - 1, 7 * P, P);
        assert_eq!(ranges(&g), [(7 * P, 8 * P - 1)]);
        // A touched range inside the span names it: nothing added.
        g.note_table(0, 512 * P - 1, 9 * P, P);
        assert_eq!(ranges(&g), [(7 * P, 8 * P - 1)]);
        // A span above the range: its first page, the one nearest.
        g.note_table(1024 * P, 1536 * P - 1, 1100 * P, P);
        assert_eq!(ranges(&g), [(7 * P, 8 * P - 1), (1024 * P, 1025 * P - 1)]);
        // A span just above a range: its first page joins that range.
        g.note_table(1025 * P, 1026 * P - 1, 1025 * P, P);
        assert_eq!(ranges(&g), [(7 * P, 8 * P - 1), (1024 * P, 1026 * P - 1)]);
        // A span below every range: its last page.
        let mut h: Gather<&Rec, 4> = Gather::new(&rec);
        page(&mut h, 4096);
        h.note_table(0, 512 * P - 1, 3 * P, P);
        assert_eq!(
            ranges(&h),
            [(511 * P, 512 * P - 1), (4096 * P, 4097 * P - 1)]
        );
    }
}
