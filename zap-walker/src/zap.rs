//! `zap_range`: clearing a range under a budget, with lock breaks.
//!
//! The shape is Linux's after the 2005 fix (`unmap_page_range` and the
//! `zap_*_range` functions): one function per level walks its table from
//! `addr` to `end` and *returns the address it reached*. An empty entry is
//! charged one unit and skipped in one step, whatever it spans; a leaf is
//! cleared and charged a page's weight; a table is descended into. After
//! every entry the budget is asked whether it is spent; if so each level
//! returns at once, the top finishes the gather (flush, then free), calls the
//! OS hook, and descends again from the root at the address reached. Progress
//! never depends on re-descending: the only descents are the first one and
//! one per lock break (or, for the `address` policy, one per block: the
//! pre-2005 behaviour it exists to reproduce).
//!
//! Two more skips come from the live counts (see `walker.rs`): a table whose
//! count drops to zero is unlinked and queued for freeing, and a walk stops
//! scanning a table once its count is zero, since the rest of it is empty.
//! Entries skipped that way are not visited and not charged.

use crate::budget::{BreakInfo, ZapBudget};
use crate::errors::WalkError;
use crate::gather::{FrameSink, Freed, FreedKind, Gather};
use crate::occupancy::{self, UNKNOWN};
use crate::stats::WalkStats;
use crate::walker::{TableRef, UNCOUNTED, Walker};
use arch_api::{
    EntryKind, FrameSource, MapFlags, PageTableEntry, PageTableLayout, PhysAddr, PhysMap, TlbFlush,
    VirtAddr,
};
use arrayvec::ArrayVec;

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'_, L, M> {
    /// Unmaps `[start, end)`: clears every leaf in it (splitting a large
    /// leaf the range covers only in part), hands the frames to `gather`'s
    /// sink (by default: back to the frame source) and frees any table page
    /// it allocated that became empty, each after the gather's flush, and
    /// breaks as `budget` decides. Returns the counters of this call. The gather is
    /// finished (nothing pending) when this returns, error or not.
    pub fn zap_range<B: ZapBudget, T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        start: VirtAddr,
        end: VirtAddr,
        budget: &mut B,
        gather: &mut Gather<T, N, S>,
    ) -> Result<WalkStats, WalkError> {
        let (s, e) = (start.as_u64(), end.as_u64());
        self.check_range(s, e)?;
        let ps = L::PAGE_SIZE;
        let before = self.stats;
        let mut call_max = 0u64;
        let mut units_mark = self.stats.budget_units;
        let mut visits_mark = self.stats.entries_visited;
        let mut addr = s;
        self.zap_first = s;
        self.zap_last = e.wrapping_sub(1);
        let mut result = Ok(());
        while addr < e {
            // A block is at least one page and ends on a page boundary.
            let be = (budget.block_end(addr, e).min(e) & !(ps - 1)).max(addr + ps);
            self.stats.descents += 1;
            let h = self.half(addr);
            let root = self.table(self.root(VirtAddr::new(addr)), 0);
            let mut live = self.root_live[h];
            // The root keeps no summary (`occupancy.rs`).
            let mut sum = UNKNOWN;
            let r = self.zap_table(0, root, addr, be, &mut live, &mut sum, budget, gather);
            self.root_live[h] = live;
            match r {
                Ok(reached) => addr = reached,
                Err(err) => {
                    result = Err(err);
                    break;
                }
            }
            if addr < e && budget.break_after_block() {
                // Everything cleared so far is flushed and freed before the
                // OS may run something else (or retake the lock), unless
                // the gather may keep it: then only what another mapping
                // could reach during the break must go first.
                if gather.ends_at_break() {
                    self.finish_gather(gather);
                }
                let info = BreakInfo {
                    reached: addr,
                    units_since_break: self.stats.budget_units - units_mark,
                    entries_since_break: self.stats.entries_visited - visits_mark,
                };
                call_max = call_max.max(info.units_since_break);
                budget.lock_break(&info);
                self.stats.lock_breaks += 1;
                units_mark = self.stats.budget_units;
                visits_mark = self.stats.entries_visited;
            }
        }
        self.finish_gather(gather);
        call_max = call_max.max(self.stats.budget_units - units_mark);
        self.stats.max_work_between_breaks = self.stats.max_work_between_breaks.max(call_max);
        let free_error = self.free_error.take();
        result?;
        if let Some(err) = free_error {
            return Err(err);
        }
        let mut d = self.stats.since(&before);
        d.max_work_between_breaks = call_max;
        Ok(d)
    }

    #[inline]
    fn visit(&mut self, level: usize) {
        self.stats.entries_visited += 1;
        #[cfg(feature = "stats")]
        {
            self.stats.visited_per_level[level] += 1;
        }
        #[cfg(not(feature = "stats"))]
        let _ = level;
    }

    #[inline]
    fn charge<B: ZapBudget>(&mut self, budget: &mut B, units: u64) {
        self.stats.budget_units += units;
        budget.charge(units);
    }

    /// Visits and charges the run of empty entries of `t` from `idx` (whose
    /// span starts at `addr`, before `end`), as many as the budget allows
    /// after the one just charged; returns the address after the run. Only
    /// the groups `sum` marks are read (`occupancy.rs`).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn skip_empty_run<B: ZapBudget>(
        &mut self,
        level: usize,
        t: TableRef,
        idx: usize,
        addr: u64,
        end: u64,
        span: u64,
        sum: &mut u32,
        budget: &mut B,
    ) -> u64 {
        // Entries that start before `end`, and those the budget allows
        // after the one charged already (`span` is the entries' span: a
        // shift computed once per table, not a loop over the levels).
        let shift = span.trailing_zeros();
        let in_range = ((end - 1 - addr) >> shift) + 1;
        let room = budget.empty_run();
        let max = usize::try_from(in_range.min(room)).unwrap_or(usize::MAX);
        let none = |raw| L::Entry::from_raw(raw).kind(level) == EntryKind::None;
        let groups = occupancy::group_shift::<L>(level);
        let n = occupancy::empty_run(t, idx, max, none, sum, groups);
        if n == 0 {
            return addr;
        }
        self.stats.entries_visited += n as u64;
        #[cfg(feature = "stats")]
        {
            self.stats.visited_per_level[level] += n as u64;
        }
        let c = budget.empty_cost().saturating_mul(n as u64);
        self.charge(budget, c);
        // `addr` is entry-aligned here (the entry before ended at it).
        match addr.checked_add((n as u64) << shift) {
            Some(a) if a < end => a,
            _ => end,
        }
    }

    /// Zaps `[addr, end)` inside table `t` of `level` (`end` no further than
    /// the table's span); `live` is `t`'s count of present entries and
    /// `sum` its occupancy summary (`occupancy.rs`: emptying an entry leaves
    /// it as it is). Returns the address reached: `end`, or less when the
    /// budget ran out.
    #[allow(clippy::too_many_arguments)]
    fn zap_table<B: ZapBudget, T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        level: usize,
        t: TableRef,
        mut addr: u64,
        end: u64,
        live: &mut u64,
        sum: &mut u32,
        budget: &mut B,
        g: &mut Gather<T, N, S>,
    ) -> Result<u64, WalkError> {
        let last = L::LEVELS - 1;
        if level == last && level > 0 {
            return self.zap_pte_range(t, addr, end, live, budget, g);
        }
        let span = L::entry_span(level);
        // Runs of empty entries are skipped in one step only in a table
        // that is sparse over the range (more than 16 entries per present
        // one): elsewhere runs are short and entry by entry is cheaper.
        // (Wrapping: `span * live` stays below 2^60 on every layout; a wrap
        // would only pick the slower way.)
        let sparse = (end - addr) >> 4 > span.wrapping_mul(*live);
        while addr < end {
            let next = Self::next_boundary(addr, level, end);
            let idx = L::index(VirtAddr::new(addr), level);
            let e = L::Entry::from_raw(t.load(idx));
            self.visit(level);
            let reached = match e.kind(level) {
                EntryKind::None => {
                    let c = budget.empty_cost();
                    self.charge(budget, c);
                    if sparse && next < end && budget.empty_run() > 1 {
                        // The empty entries that follow, in one step (a
                        // sparse table is mostly runs of them).
                        self.skip_empty_run(level, t, idx + 1, next, end, span, sum, budget)
                    } else {
                        next
                    }
                }
                EntryKind::Leaf if level == last || (addr % span == 0 && next - addr == span) => {
                    self.clear_leaf(t, idx, e, level, addr, live, g);
                    let c = budget.page_cost();
                    self.charge(budget, c);
                    next
                }
                // A large leaf the zap covers whole although this descent
                // (an `address` block) ends inside it: still one unit, the
                // walker's contract under every budget. The walk goes on
                // from the leaf's end, past the block's.
                EntryKind::Leaf if addr % span == 0 && addr + (span - 1) <= self.zap_last => {
                    self.clear_leaf(t, idx, e, level, addr, live, g);
                    let c = budget.page_cost();
                    self.charge(budget, c);
                    return Ok(addr + span);
                }
                EntryKind::Leaf => {
                    // The range covers part of a large leaf: split it into a
                    // table of next-level leaves, then zap inside that.
                    let child = self.split_leaf(t, idx, level, e, addr, g)?;
                    self.descend(t, idx, level, child, addr, next, live, budget, g)?
                }
                EntryKind::Table if level < last => {
                    self.descend(t, idx, level, e.addr(), addr, next, live, budget, g)?
                }
                EntryKind::Table => {
                    return Err(WalkError::Corrupt {
                        addr: VirtAddr::new(addr),
                    });
                }
            };
            addr = reached;
            if addr < next {
                return Ok(addr); // the budget ran out below
            }
            if *live == 0 {
                // Nothing left in this table (`addr` is past `end` when a
                // covered large leaf below outlasted the block).
                return Ok(end.max(addr));
            }
            if budget.exhausted() {
                return Ok(addr);
            }
        }
        Ok(addr)
    }

    /// Zaps `[addr, next)` in the child table behind entry `idx` of `t`, then
    /// unlinks and queues the child if it became empty.
    #[allow(clippy::too_many_arguments)]
    fn descend<B: ZapBudget, T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        t: TableRef,
        idx: usize,
        level: usize,
        child_pa: PhysAddr,
        addr: u64,
        next: u64,
        live: &mut u64,
        budget: &mut B,
        g: &mut Gather<T, N, S>,
    ) -> Result<u64, WalkError> {
        let child = self.table(child_pa, level + 1);
        let span = L::entry_span(level);
        let block = addr & !(span - 1);
        let c = self.count_of(child_pa, level + 1, addr)?;
        let (mut child_live, mut child_sum) = (c.n, c.sum);
        let r = self.zap_table(
            level + 1,
            child,
            addr,
            next,
            &mut child_live,
            &mut child_sum,
            budget,
            g,
        );
        let free = r.is_ok()
            && child_live == 0
            && self.free_empty_tables
            && self.take_if_ours(&c, level + 1, block);
        if !free && c.n != UNCOUNTED {
            // An empty table has nothing to summarise.
            let sum = if child_live == 0 { 0 } else { child_sum };
            self.store_count(&c, child_live, sum);
        }
        let reached = r?;
        if free {
            #[cfg(feature = "debug")]
            if !child.all_zero() {
                return Err(WalkError::Corrupt {
                    addr: VirtAddr::new(addr),
                });
            }
            // Unlink first; the MMU may still hold a walk through the page
            // (paging-structure caches), so it is freed only after the
            // flush. One address of its span is enough to name it:
            // invalidating any address the table translated drops the cached
            // walks through it (x86 `invlpg` drops every paging-structure-
            // cache entry of the PCID; arm64 `tlbi vae1is`, unlike the
            // last-level `vale1is`, drops the walk entries of that address at
            // every level). That is why Linux's `pte_free_tlb` notes one
            // `PAGE_SIZE` rather than the span, and it keeps a sparse
            // gather's range small: usually the leaves just cleared in the
            // span already name it.
            // A plain (release) store, not a swap: a table entry has no
            // dirty bit to collect and its value is known (Linux clears a
            // pmd/pud with a plain write too; only leaves need
            // `ptep_get_and_clear`'s exchange). The LOCKed `xchg` was half
            // of this function's time in story 2.
            t.store(idx, L::Entry::EMPTY.raw());
            *live -= 1;
            g.note_table(block, block + (span - 1), addr, L::PAGE_SIZE);
            if block < self.zap_first || block + (span - 1) > self.zap_last {
                g.outside_table = true;
            }
            let size = self.alloc_bytes(level + 1);
            self.gather_push(
                g,
                Freed {
                    addr: child_pa,
                    size,
                    kind: FreedKind::Table((level + 1) as u8),
                },
            );
        }
        Ok(reached)
    }

    /// Clears the leaf at `idx` (loaded as `seen`) and queues its frame.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn clear_leaf<T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        t: TableRef,
        idx: usize,
        seen: L::Entry,
        level: usize,
        addr: u64,
        live: &mut u64,
        g: &mut Gather<T, N, S>,
    ) {
        // The entry as the MMU left it (A/D bits included).
        let old = t.clear_leaf(idx, seen);
        *live -= 1;
        self.stats.leaves_cleared += 1;
        let span = L::entry_span(level);
        let block = addr & !(span - 1);
        g.note_range(block, block + (span - 1));
        if !old.map_flags().contains(MapFlags::DEVICE) {
            self.gather_push(
                g,
                Freed {
                    addr: old.addr(),
                    size: span,
                    kind: FreedKind::Frame,
                },
            );
        }
    }

    /// Replaces the large leaf `e` at `idx` of `t` by a table of next-level
    /// leaves mapping the same frames. Break-before-make: the leaf is cleared
    /// and its range flushed before the table is linked, as arm64 requires
    /// when the size of a live translation changes (Arm ARM DDI 0487, "Using
    /// break-before-make when updating translation table entries": without
    /// it two sizes may be cached at once, a TLB conflict abort or a loss of
    /// coherency).
    fn split_leaf<T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        t: TableRef,
        idx: usize,
        level: usize,
        e: L::Entry,
        addr: u64,
        g: &mut Gather<T, N, S>,
    ) -> Result<PhysAddr, WalkError> {
        let span = L::entry_span(level);
        let block = addr & !(span - 1);
        let cl = level + 1;
        if !L::leaf_allowed(cl) {
            return Err(WalkError::CannotSplit {
                addr: VirtAddr::new(block),
            });
        }
        let failed = |error| WalkError::SplitFailed {
            addr: VirtAddr::new(addr),
            error,
        };
        self.reserve_counts(1).map_err(failed)?;
        let child_pa = self.alloc_table(cl).map_err(failed)?;
        let child = self.table(child_pa, cl);
        let cspan = L::entry_span(cl);
        let flags = e.map_flags();
        let base = e.addr().as_u64();
        let n = L::entries(cl) as u64;
        for i in 0..n {
            let leaf = L::Entry::new_leaf(PhysAddr::new(base + i * cspan), flags, cl);
            child.store(L::index(VirtAddr::new(block + i * cspan), cl), leaf.raw());
        }
        t.swap(idx, L::Entry::EMPTY.raw());
        g.flush_now(block, block + (span - 1), L::PAGE_SIZE);
        let sum = if occupancy::kept::<L>(cl) {
            occupancy::full::<L>(cl)
        } else {
            0
        };
        self.count_new(child_pa, cl, n, sum);
        t.store(idx, L::Entry::new_table(child_pa).raw());
        self.stats.splits += 1;
        Ok(child_pa)
    }

    /// Queues a record: in the fixed batch, else in a chained page, else
    /// after finishing the batch (Linux's `tlb_flush_mmu` when no batch
    /// page can be had).
    #[inline]
    fn gather_push<T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        g: &mut Gather<T, N, S>,
        f: Freed,
    ) {
        if let Err(f) = g.push(f) {
            if let Err(f) = self.chain_push(g, f) {
                self.finish_gather(g);
                // Cannot fail: the batch is empty and holds at least one record.
                let _ = g.push(f);
            }
        }
    }

    /// Ends a batch: one flush of the range touched, then the frees. A free
    /// the source refuses is remembered and reported by `zap_range`.
    pub(crate) fn finish_gather<T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        g: &mut Gather<T, N, S>,
    ) {
        if g.is_empty() {
            return;
        }
        g.flush(L::PAGE_SIZE);
        // Frames go on in chunks (one `free_many` each, or to the sink);
        // tables go to the stock (or the source) one by one.
        const CHUNK: usize = 64;
        let mut frames = ArrayVec::<(PhysAddr, u64), CHUNK>::new();
        let (mut n_frames, mut bytes, mut tables) = (0u64, 0u64, 0u64);
        let mut one = |w: &mut Self, sink: &mut S, f: Freed| match f.kind {
            FreedKind::Frame => {
                n_frames += 1;
                bytes += f.size;
                if frames.is_full() {
                    w.hand_on(&mut frames, sink);
                }
                frames.push((f.addr, f.size));
            }
            FreedKind::Table(level) => {
                tables += 1;
                if let Err(error) = w.release_table(f.addr, level as usize) {
                    w.free_error.get_or_insert(WalkError::FreeFailed {
                        frame: f.addr,
                        error,
                    });
                }
            }
        };
        for i in 0..g.batch.len() {
            one(self, &mut g.sink, g.batch[i]);
        }
        g.batch.clear();
        self.chain_drain(g, &mut one);
        if !frames.is_empty() {
            self.hand_on(&mut frames, &mut g.sink);
        }
        g.stats.frames_freed += n_frames;
        g.stats.frame_bytes_freed += bytes;
        g.stats.tables_freed += tables;
        g.stats.batches += 1;
    }

    /// Hands a chunk of flushed frames to `sink`, or returns them to the
    /// source (the first refusal is kept for `zap_range` to report).
    fn hand_on<const C: usize, S: FrameSink>(
        &mut self,
        frames: &mut ArrayVec<(PhysAddr, u64), C>,
        sink: &mut S,
    ) {
        if S::TO_SOURCE {
            let free_error = &mut self.free_error;
            self.mem.free_many(frames, &mut |frame, error| {
                free_error.get_or_insert(WalkError::FreeFailed { frame, error });
            });
        } else {
            sink.take(frames);
        }
        frames.clear();
    }
}
