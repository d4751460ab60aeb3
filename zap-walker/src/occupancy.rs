//! Occupancy summaries: which parts of a sparse table may hold a present
//! entry, so a zap's run of empty entries jumps to the next one instead of
//! reading every zero in between.
//!
//! Story 2 (map 4 pages spread over 1 TiB, unmap the TiB) on x86_64 scans two
//! PDPTs of 512 entries each holding two present entries: ~1 000 loads of
//! zero per cycle, a seventh of it. Each table that holds table entries
//! (levels below the root and above the last) keeps 32 summary bits in its
//! live-count word (`live.rs`, bits [`SHIFT`]`..SHIFT + 32`, above the count):
//! bit `g` covers entries `g << shift .. (g + 1) << shift`, where `shift`
//! makes 32 groups of the table (16 entries on x86_64, 64 on ia64-sim; one
//! entry per bit in a table of 32 entries or fewer).
//!
//! The invariant, one way only: **every present entry that meets the window
//! has its group's bit set.** A clear bit proves its group empty; a set bit
//! proves nothing (its group is read). So every store that makes an entry
//! of such a table present sets its bit (the map's link and large-leaf
//! stores, a split's table, a rescan), while a store that empties one
//! changes nothing: a bit goes only when its whole group is read and found
//! empty during a skip, or when the table's count reaches zero. Stale set
//! bits cost reads, never a wrong skip.
//!
//! Who writes them: only the walker's owner, under its `&mut`, as the
//! counts. The unlocked [`LeafPath`](crate::LeafPath) writes last-level
//! entries only, and last-level tables keep no summary (their zap,
//! `zap_pte_range`, reads entry by entry: a dense table's runs are short),
//! so no store that can race with the owner has a summary to keep. The root
//! keeps none either (its count is the walker's field; a zap spans few root
//! entries): walks there read every entry, as they do in a table other code
//! linked that has no count ([`UNKNOWN`]).
//!
//! [`Walker::check_consistency`](crate::Walker::check_consistency) checks
//! the invariant on every counted table; `rescan` rebuilds the summaries.

use crate::walker::TableRef;
use arch_api::PageTableLayout;

/// The summary's first bit in a live-count word (the count stays below it:
/// at most 8 192 entries per table).
pub(crate) const SHIFT: u32 = 16;
/// The count's bits in a live-count word.
pub(crate) const COUNT_MASK: u64 = (1 << SHIFT) - 1;
/// The summary of a table that keeps none: every group may hold entries.
pub(crate) const UNKNOWN: u32 = u32::MAX;

/// Whether tables at `level` keep a summary (they hold table entries and
/// are not the root).
#[inline(always)]
pub(crate) fn kept<L: PageTableLayout>(level: usize) -> bool {
    level > 0 && level + 1 < L::LEVELS
}

/// Log2 of the entries one summary bit of a table at `level` covers.
#[inline(always)]
pub(crate) fn group_shift<L: PageTableLayout>(level: usize) -> u32 {
    L::INDEX_BITS[level].saturating_sub(5)
}

/// The summary bit of entry `idx` of a table at `level`: what a store that
/// makes the entry present ORs in.
#[inline(always)]
pub(crate) fn bit<L: PageTableLayout>(level: usize, idx: usize) -> u32 {
    #[cfg(all(test, not(kmm_loom)))]
    if tests::DROP_BIT.with(|d| d.get()) {
        // Broken variant (`a_missing_bit_is_caught`): the store forgets
        // its bit, as a store path that does not keep the summary would.
        return 0;
    }
    #[cfg(kmm_loom)]
    if crate::loom_mutation::MUTATION.active(crate::loom_mutation::NO_SUMMARY_BIT) {
        // The same under loom (`loom_summary_broken`).
        return 0;
    }
    1 << (idx >> group_shift::<L>(level))
}

/// The summary of a table at `level` whose entries are all present.
#[inline]
pub(crate) fn full<L: PageTableLayout>(level: usize) -> u32 {
    let groups = L::entries(level) >> group_shift::<L>(level);
    if groups >= 32 {
        UNKNOWN
    } else {
        (1 << groups) - 1
    }
}

/// The summary in a live-count word (without the walker's flag bits).
#[inline(always)]
pub(crate) fn of_word(v: u64) -> u32 {
    (v >> SHIFT) as u32
}

/// The live-count word's bits for count `n` and summary `sum`.
#[inline(always)]
pub(crate) fn word(n: u64, sum: u32) -> u64 {
    n | u64::from(sum) << SHIFT
}

/// How many of the entries `from..from + max` of `t` (clipped to the
/// table) are `none`, counting from `from` and stopping at the first that is
/// not, as [`TableRef::empty_run`] answers, but reading only the groups
/// `sum` marks. A marked group read whole and found empty loses its mark.
#[inline]
pub(crate) fn empty_run(
    t: TableRef,
    from: usize,
    max: usize,
    none: impl Fn(u64) -> bool,
    sum: &mut u32,
    shift: u32,
) -> usize {
    if *sum == UNKNOWN {
        return t.empty_run(from, max, none);
    }
    let stop = from.saturating_add(max).min(t.len());
    let mut i = from;
    while i < stop {
        // Groups at or after `i`'s (32 groups: `i >> shift` < 32).
        let ahead = *sum & (UNKNOWN << (i >> shift));
        if ahead == 0 {
            return stop - from;
        }
        let g = ahead.trailing_zeros() as usize;
        let (first, end) = (g << shift, (g + 1) << shift);
        i = i.max(first);
        if i >= stop {
            break;
        }
        let upto = end.min(stop);
        let n = t.empty_run(i, upto - i, &none);
        if i == first && upto == end && n == end - first {
            *sum &= !(1 << g);
        }
        i += n;
        if i < upto {
            return i - from; // a present entry
        }
    }
    stop - from
}

#[cfg(all(test, not(kmm_loom)))]
pub(crate) mod tests {
    use super::*;
    use std::cell::Cell;

    std::thread_local! {
        /// Set by a test: `bit` returns no bit (the broken variant).
        pub(crate) static DROP_BIT: Cell<bool> = const { Cell::new(false) };
    }

    /// The summarised run equals the plain one for every start, length and
    /// summary that marks (at least) the groups holding entries, and clears
    /// only groups it read whole and found empty.
    #[test]
    fn summarised_runs_match_plain_runs() {
        let mut words = [0u64; 512];
        for &i in &[0usize, 17, 18, 255, 256, 300, 511] {
            words[i] = 1;
        }
        let t = TableRef::new(words.as_mut_ptr() as *mut u8, 512);
        let exact = (0..512)
            .filter(|&i| words[i] != 0)
            .fold(0u32, |s, i| s | 1 << (i >> 4));
        let none = |v: u64| v == 0;
        let steps: &[usize] = if cfg!(miri) {
            &[0, 1, 19, 257]
        } else {
            &[0, 1, 2, 15, 16, 19, 100, 257, 301, 511]
        };
        for stale in [0u32, 1 << 5 | 1 << 31, UNKNOWN] {
            for &from in steps {
                for max in [1usize, 7, 16, 40, 300, usize::MAX] {
                    let mut sum = exact | stale;
                    let n = empty_run(t, from, max, none, &mut sum, 4);
                    assert_eq!(n, t.empty_run(from, max, none), "from {from} max {max}");
                    assert_eq!(sum & exact, exact, "a group with entries lost its bit");
                }
            }
        }
        // A stale group read whole goes; one read in part stays.
        let mut sum = exact | 1 << 5;
        assert_eq!(empty_run(t, 19, usize::MAX, none, &mut sum, 4), 255 - 19);
        assert_eq!(sum, exact);
        let mut sum = exact | 1 << 5;
        empty_run(t, 85, usize::MAX, none, &mut sum, 4);
        assert_eq!(sum, exact | 1 << 5);
    }

    #[test]
    fn groups_per_layout() {
        use arch_ia64_sim::Ia64Sim;
        use arch_x86_64::X86_64Pml4;
        assert_eq!(group_shift::<X86_64Pml4>(1), 4);
        assert_eq!(bit::<X86_64Pml4>(2, 511), 1 << 31);
        assert_eq!(full::<X86_64Pml4>(2), UNKNOWN);
        assert_eq!(group_shift::<Ia64Sim>(1), 6);
        assert_eq!(bit::<Ia64Sim>(1, 64), 1 << 1);
        assert!(kept::<X86_64Pml4>(2) && !kept::<X86_64Pml4>(0) && !kept::<X86_64Pml4>(3));
    }

    /// The broken variant: one map's store forgets its summary bit. The
    /// consistency check reports it, and a zap's skip jumps over the entry
    /// (which the correct run, and a one-by-one walk, clear).
    #[test]
    fn a_missing_bit_is_caught() {
        use crate::{Frames, Gather, MapFlags, VirtAddr, WalkError, Walker, WorkBudget};
        use arch_api::{CostModel, FrameSource, PhysArena, SoftTlb};
        use arch_x86_64::X86_64Pml4;
        const PS: u64 = 4096;
        let g = 1u64 << 30; // a PDPT entry's span
        for broken in [false, true] {
            let mem = PhysArena::new(8 << 20, PS).unwrap();
            let tlb = SoftTlb::new(1, PS, CostModel::FREE);
            let mut w = Walker::<X86_64Pml4, _>::new(&mem).unwrap();
            for (k, a) in [g, 40 * g].into_iter().enumerate() {
                let f = [mem.alloc(PS, PS).unwrap()];
                DROP_BIT.with(|d| d.set(broken && k == 1));
                let r = w.map_range(VirtAddr::new(a), Frames::List(&f), MapFlags::WRITE);
                DROP_BIT.with(|d| d.set(false));
                r.unwrap();
            }
            let check = w.check_consistency();
            assert_eq!(check.is_err(), broken, "{check:?}");
            if broken {
                assert!(matches!(check, Err(WalkError::Corrupt { .. })));
            }
            let mut gather: Gather<_> = Gather::new(tlb.on(0));
            let stats = w
                .zap_range(
                    VirtAddr::new(0),
                    VirtAddr::new(300 * g),
                    &mut WorkBudget::for_page_size(PS, true),
                    &mut gather,
                )
                .unwrap();
            // Under the missing bit the entry at 40 GiB is jumped over.
            assert_eq!(stats.leaves_cleared, if broken { 1 } else { 2 });
            assert_eq!(w.translate(VirtAddr::new(40 * g)).is_some(), broken);
            drop(w);
            assert_eq!(mem.bytes_in_use(), 0);
        }
    }
}
