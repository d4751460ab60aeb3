//! The walker's live counts (see `walker.rs` for what they are for): how a
//! walk reads a table's count and where it is kept ([`Count`]), how it
//! changes or forgets it, how a table met without one is counted, and how
//! the window is counted again from the tables as they are ([`rescan`],
//! also what [`attach`] runs) and checked ([`check_consistency`]).
//!
//! [`rescan`]: crate::Walker::rescan
//! [`attach`]: crate::Walker::attach
//! [`check_consistency`]: crate::Walker::check_consistency

use crate::errors::WalkError;
use crate::occupancy::{self, COUNT_MASK, UNKNOWN};
use crate::store::SideStore;
use crate::walker::Walker;
use arch_api::{
    EntryKind, FrameError, FrameSource, PageTableEntry, PageTableLayout, PhysAddr, PhysMap,
    VirtAddr,
};

/// The live count a table without one reports (a last-level table once a
/// `LeafPath` exists): never zero, and at least 512 decrements from it.
pub(crate) const UNCOUNTED: u64 = u64::MAX;

/// Marks, in the side store, a table the walker allocated (it may free it).
const OURS: u64 = 1 << 63;

/// The slot of a count that is kept nowhere (a plain index rather than an
/// `Option`: one compare, no discriminant to carry through a walk).
const NO_SLOT: usize = usize::MAX;

/// A table's live count as a walk read it, and where it is kept.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Count {
    pa: PhysAddr,
    /// Its slot in the side store ([`NO_SLOT`]: the table keeps no count).
    slot: usize,
    /// The store's `moves` when `slot` was found.
    moves: u64,
    /// The count ([`UNCOUNTED`] when the table keeps none).
    pub(crate) n: u64,
    /// The occupancy summary (`occupancy.rs`; [`UNKNOWN`] when the table
    /// keeps none).
    pub(crate) sum: u32,
    /// Whether the walker allocated the table.
    ours: bool,
}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'_, L, M> {
    /// Whether tables at `level` (below the root) keep a live count.
    #[inline(always)]
    pub(crate) fn counted(&self, level: usize) -> bool {
        // One compare: `counted_below` is `LEVELS - 1` once tables are
        // pinned (the last level keeps no count), else past every level.
        level < self.counted_below
    }

    /// The first address of the table at `level` holding `va`.
    #[inline]
    pub(crate) fn table_base(&self, va: u64, level: usize) -> u64 {
        if level == 0 {
            return if self.split_halves && va >> 63 == 1 {
                0u64.wrapping_sub(1 << (L::level_shift(0) + L::INDEX_BITS[0]))
            } else {
                0
            };
        }
        let span = L::entry_span(level - 1);
        va & !(span - 1)
    }

    /// The live count of the table at `pa` of `level` (> 0) that
    /// translates `va`, with where it is kept: [`UNCOUNTED`] if that level
    /// keeps none, and a table met for the first time (linked by other
    /// code) is counted now, by one scan. Fails only when the side store
    /// cannot grow for it.
    #[inline(always)]
    pub(crate) fn count_of(
        &mut self,
        pa: PhysAddr,
        level: usize,
        va: u64,
    ) -> Result<Count, WalkError> {
        if !self.counted(level) {
            return Ok(Count {
                pa,
                slot: NO_SLOT,
                moves: 0,
                n: UNCOUNTED,
                sum: UNKNOWN,
                ours: false,
            });
        }
        let (i, v) = match self.counts.lookup(pa) {
            Some(found) => found,
            None => {
                let i = self.adopt_table(pa, level, self.table_base(va, level))?;
                (i, self.counts.value(i))
            }
        };
        Ok(Count {
            pa,
            slot: i,
            moves: self.counts.moves(),
            n: v & COUNT_MASK,
            sum: occupancy::of_word(v),
            ours: v & OURS != 0,
        })
    }

    /// The slot of `c` now (found again if members moved since).
    #[inline(always)]
    fn slot(&self, c: &Count) -> Option<usize> {
        let i = c.slot;
        // One test on the common path: an array slot never moves, and
        // `NO_SLOT` has the hash bit set like every hash slot.
        if SideStore::is_array_slot(i) {
            return Some(i);
        }
        if i == NO_SLOT {
            None
        } else if self.counts.still_at(i, c.moves) {
            Some(i)
        } else {
            self.counts.find(c.pa)
        }
    }

    /// Sets the count `c` refers to and its summary (no-op for an
    /// uncounted table), keeping whether the table is the walker's.
    #[inline(always)]
    pub(crate) fn store_count(&mut self, c: &Count, n: u64, sum: u32) {
        if let Some(i) = self.slot(c) {
            let ours = if c.ours { OURS } else { 0 };
            self.counts.set_value(i, ours | occupancy::word(n, sum));
        }
    }

    /// Counts a table the walker just allocated (room was reserved), with
    /// its summary.
    #[inline(always)]
    pub(crate) fn count_new(&mut self, pa: PhysAddr, level: usize, n: u64, sum: u32) {
        if self.counted(level) {
            self.counts.insert_new(pa, OURS | occupancy::word(n, sum));
        } else if self.tables_pinned {
            // A last-level table made once tables are pinned keeps no count,
            // but its record says it is the walker's: only such a table may
            // give way to a large leaf (`free_table.rs`).
            self.counts.insert_new(pa, OURS);
        }
    }

    /// Whether the table at `pa` of `level` is one the walker allocated and
    /// may free: recorded as its own, its whole span inside the window.
    pub(crate) fn is_ours(&self, pa: PhysAddr, level: usize, base: u64) -> bool {
        let last = base.wrapping_add(L::entry_span(level - 1) - 1);
        if !self.owns_root && (base < self.window[0] || last > self.window[1]) {
            return false;
        }
        self.counts.get(pa).is_some_and(|v| v & OURS != 0)
    }

    /// Forgets the record of a table about to be freed.
    pub(crate) fn forget(&mut self, pa: PhysAddr) {
        if let Some(i) = self.counts.find(pa) {
            self.counts.remove_at(i);
        }
    }

    /// Makes room in the side store for the counts of `tables` more tables
    /// the walker allocates.
    #[inline]
    pub(crate) fn reserve_counts(&mut self, tables: usize) -> Result<(), FrameError> {
        self.counts.reserve_new(self.mem, tables)
    }

    /// Makes room in the side store for the counts of `tables` more tables
    /// other code linked (wherever their frames are).
    pub(crate) fn reserve_foreign_counts(&mut self, tables: usize) -> Result<(), FrameError> {
        self.counts.reserve_foreign(self.mem, tables)
    }

    /// Whether a zap may free the table `c` refers to, of `level`, whose
    /// span starts at `base`: the walker allocated it and all of it lies in
    /// the window. Forgets its count when it may.
    #[inline(always)]
    pub(crate) fn take_if_ours(&mut self, c: &Count, level: usize, base: u64) -> bool {
        if !c.ours {
            return false;
        }
        let last = base.wrapping_add(L::entry_span(level - 1) - 1);
        if !self.owns_root && (base < self.window[0] || last > self.window[1]) {
            return false;
        }
        match self.slot(c) {
            Some(i) => {
                self.counts.remove_at(i);
                true
            }
            None => false,
        }
    }

    /// The first address entry `i` of the table at `level` whose span
    /// starts at `base` translates (sign-extended in a root whose halves
    /// share it, as x86_64's).
    #[inline]
    pub(crate) fn entry_va(&self, level: usize, base: u64, i: usize) -> u64 {
        let va = base.wrapping_add((i as u64).wrapping_mul(L::entry_span(level)));
        let tree_bits = L::level_shift(0) + L::INDEX_BITS[0];
        if level == 0 && !self.split_halves && tree_bits < 64 && va >> (tree_bits - 1) & 1 == 1 {
            va | !((1u64 << tree_bits) - 1)
        } else {
            va
        }
    }

    /// Whether entry `i` of the table at `level` whose span starts at `base`
    /// meets the window.
    #[inline]
    fn in_window(&self, level: usize, base: u64, i: usize) -> bool {
        if self.window == [0, u64::MAX] {
            return true;
        }
        let first = self.entry_va(level, base, i);
        let last = first.wrapping_add(L::entry_span(level) - 1);
        first <= self.window[1] && last >= self.window[0]
    }

    /// Present entries of the table at `pa` (`level`, span from `base`)
    /// that meet the window, and their summary where the level keeps one:
    /// the table's live-count word without the flag bits.
    fn scan(&self, pa: PhysAddr, level: usize, base: u64) -> u64 {
        let t = self.table(pa, level);
        let (mut n, mut sum) = (0, 0);
        for i in 0..t.len() {
            if L::Entry::from_raw(t.load(i)).kind(level) != EntryKind::None
                && self.in_window(level, base, i)
            {
                n += 1;
                sum |= 1 << (i >> occupancy::group_shift::<L>(level));
            }
        }
        let sum = if occupancy::kept::<L>(level) { sum } else { 0 };
        occupancy::word(n, sum)
    }

    /// Counts a table met for the first time (not the walker's); its slot.
    #[cold]
    #[inline(never)]
    fn adopt_table(&mut self, pa: PhysAddr, level: usize, base: u64) -> Result<usize, WalkError> {
        let v = self.scan(pa, level, base);
        self.counts
            .reserve_for(self.mem, pa)
            .map_err(WalkError::OutOfTables)?;
        Ok(self.counts.insert(pa, v))
    }

    /// Counts the window again from the tables as they are, after other code
    /// changed tables or leaves inside it (see the module docs). Tables
    /// other code unlinked are forgotten (those the walker had allocated are
    /// the other code's now); nothing is freed. On failure (the side store
    /// could not grow) the counts are as before.
    pub fn rescan(&mut self) -> Result<(), WalkError> {
        let old = core::mem::take(&mut self.counts);
        let counted = self.count_roots(&old);
        let mut stale = match counted {
            Ok(live) => {
                self.root_live = live;
                old
            }
            Err(_) => core::mem::replace(&mut self.counts, old),
        };
        // Pages of this source; if it refuses them back they stay out.
        let _ = stale.release(self.mem);
        counted.map(|_| ())
    }

    /// The present entries of each root inside the window, counting every
    /// table below them into the (empty) side store; whether a table is the
    /// walker's comes from `old`.
    fn count_roots(&mut self, old: &SideStore) -> Result<[u64; 2], WalkError> {
        let mut live = self.root_live;
        for h in 0..self.n_roots {
            let va = if h == 1 { 1 << 63 } else { self.window[0] };
            let base = self.table_base(va, 0);
            live[self.half(va)] = self.rescan_subtree(old, self.roots[h], 0, base)?;
        }
        Ok(live)
    }

    fn rescan_subtree(
        &mut self,
        old: &SideStore,
        pa: PhysAddr,
        level: usize,
        base: u64,
    ) -> Result<u64, WalkError> {
        let t = self.table(pa, level);
        if level + 1 < L::LEVELS {
            for i in 0..t.len() {
                if !self.in_window(level, base, i) {
                    continue;
                }
                let e = L::Entry::from_raw(t.load(i));
                if e.kind(level) == EntryKind::Table {
                    let child_base = self.entry_va(level, base, i);
                    self.rescan_subtree(old, e.addr(), level + 1, child_base)?;
                }
            }
        }
        let v = self.scan(pa, level, base);
        let n = v & COUNT_MASK;
        if level == 0 || !self.counted(level) {
            return Ok(n);
        }
        let ours = old.get(pa).unwrap_or(0) & OURS;
        self.counts
            .reserve_for(self.mem, pa)
            .map_err(WalkError::OutOfTables)?;
        self.counts.insert(pa, ours | v);
        Ok(n)
    }

    /// Walks every table in the window and checks that each live count
    /// matches the present entries it counts (tables linked by other code
    /// since the walker last met them count as wrong), that no table is
    /// linked at the last level, and, in a tree the walker owns with
    /// freeing on, that no empty table stayed. O(table pages); for tests and
    /// the `debug` configuration.
    pub fn check_consistency(&self) -> Result<(), WalkError> {
        for h in 0..self.n_roots {
            let va = if h == 1 { 1 << 63 } else { self.window[0] };
            let base = self.table_base(va, 0);
            let (n, _) = self.count_subtree(self.roots[h], 0, base)?;
            if n != self.root_live[self.half(va)] {
                return Err(WalkError::Corrupt {
                    addr: VirtAddr::new(base),
                });
            }
        }
        Ok(())
    }

    /// Present entries of the table at `pa` meeting the window and the
    /// summary bits they need, checking its children's counts and
    /// summaries.
    fn count_subtree(
        &self,
        pa: PhysAddr,
        level: usize,
        base: u64,
    ) -> Result<(u64, u32), WalkError> {
        let t = self.table(pa, level);
        let (mut present, mut needed) = (0, 0u32);
        for i in 0..t.len() {
            if !self.in_window(level, base, i) {
                continue;
            }
            let e = L::Entry::from_raw(t.load(i));
            let va = self.entry_va(level, base, i);
            match e.kind(level) {
                EntryKind::None => continue,
                EntryKind::Table if level + 1 < L::LEVELS => {
                    let (n, need) = self.count_subtree(e.addr(), level + 1, va)?;
                    let corrupt = Err(WalkError::Corrupt {
                        addr: VirtAddr::new(va),
                    });
                    if self.counted(level + 1) {
                        // The count exact; the summary marking (at least)
                        // every group with a present entry.
                        let kept = occupancy::kept::<L>(level + 1);
                        match self.counts.get(e.addr()) {
                            Some(v)
                                if v & COUNT_MASK == n
                                    && (!kept || need & !occupancy::of_word(v) == 0) => {}
                            _ => return corrupt,
                        }
                    }
                    if n == 0 && self.free_empty_tables && self.owns_root {
                        return corrupt;
                    }
                }
                EntryKind::Table => {
                    return Err(WalkError::Corrupt {
                        addr: VirtAddr::new(va),
                    });
                }
                EntryKind::Leaf => {}
            }
            present += 1;
            needed |= 1 << (i >> occupancy::group_shift::<L>(level));
        }
        Ok((present, needed))
    }
}
