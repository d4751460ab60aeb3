//! Runs of empty entries skipped in one step (`ZapBudget::empty_run`)
//! against the same zap visiting them one by one, in tables whose occupancy
//! summaries (`occupancy.rs`) were kept by every kind of store.

#[macro_use]
mod common;

use arch_api::PageTableLayout;
use common::{Tiny, Tracked, va};
use zap_walker::{
    BreakInfo, Frames, Gather, MapFlags, MapHint, Unbounded, Walker, WorkBudget, ZapBudget,
};

const ARENA: u64 = if cfg!(miri) { 16 << 20 } else { 1 << 30 };
/// The summary scenario's arena: its tables, a few pages and one large
/// leaf of at most 32 MiB (a smaller arena is set up much faster).
#[cfg_attr(miri, allow(dead_code))]
const SUM_ARENA: u64 = 112 << 20;

/// A `WorkBudget` that charges empty entries one at a time (the trait's
/// default `empty_run`), the reference for the runs a `WorkBudget` skips in
/// one step.
struct OneByOne<B>(B);

impl<B: ZapBudget> ZapBudget for OneByOne<B> {
    fn name(&self) -> &'static str {
        "one-by-one"
    }
    fn empty_cost(&self) -> u64 {
        self.0.empty_cost()
    }
    fn page_cost(&self) -> u64 {
        self.0.page_cost()
    }
    fn charge(&mut self, units: u64) {
        self.0.charge(units)
    }
    fn exhausted(&self) -> bool {
        self.0.exhausted()
    }
    fn lock_break(&mut self, info: &BreakInfo) {
        self.0.lock_break(info)
    }
}

/// Skipping a run of empty entries in one step changes nothing the caller
/// can see: the same lock breaks at the same addresses with the same work
/// between them, the same entries visited and the same frames freed as
/// visiting them one by one, under budgets that run out inside the runs.
fn empty_runs_break_where_one_by_one_would<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    let span = L::entry_span(1);
    // Pages spread over sparse tables: one every few entries of level 1,
    // then a range far past them.
    let at: Vec<u64> = (0..6).map(|k| span * (1 + 37 * k) + (k % 3) * ps).collect();
    let end = span * 300;
    if L::VA_BITS < 64 && end >= 1 << (L::VA_BITS - 1) {
        return;
    }
    let budgets: &[(u64, u64)] = if cfg!(miri) {
        &[(7, 1)]
    } else {
        &[(7, 1), (64, 1), (50, 3), (1 << 20, 1)]
    };
    for &(budget, empty) in budgets {
        let mut runs = Vec::new();
        for one_by_one in [false, true] {
            let t = Tracked::new(ARENA, ps);
            let mut g: Gather<_> = Gather::new(t.tlb.on(0));
            let mut w = Walker::<L, _>::new(&t).unwrap();
            for &a in &at {
                w.map_range(va(a), Frames::List(&[t.frame(a)]), MapFlags::WRITE)
                    .unwrap();
            }
            let breaks = std::cell::RefCell::new(Vec::new());
            let hook = |i: &BreakInfo| breaks.borrow_mut().push(*i);
            let b = WorkBudget::new(budget, empty, ps).with_hook(hook);
            let r = if one_by_one {
                w.zap_range(va(0), va(end), &mut OneByOne(b), &mut g)
            } else {
                let mut b = b;
                w.zap_range(va(0), va(end), &mut b, &mut g)
            }
            .unwrap();
            assert_eq!(w.tables_below_root(), 0, "{}", L::NAME);
            let freed: Vec<_> = at.iter().map(|&a| t.freed(t.frame(a))).collect();
            runs.push((
                breaks.into_inner(),
                r.entries_visited,
                r.budget_units,
                freed,
            ));
        }
        assert_eq!(
            runs[0],
            runs[1],
            "{}: budget {budget}, empty {empty}",
            L::NAME
        );
        // Up to the last present entry of level 1 (then its table is empty).
        assert!(runs[0].1 > 180, "{}: the runs were visited", L::NAME);
    }
}
on_every_layout!(
    empty_runs_break_where_one_by_one_would_test,
    empty_runs_break_where_one_by_one_would
);

/// Replays on a fresh walker the stores that keep occupancy summaries:
/// pages spread over the first table of every level that keeps one (single
/// descents), a map across two last-level tables (the plan and install
/// passes), a large leaf, then zaps of single pages that empty a table
/// under a marked group (its bit stays, stale), one that splits the large
/// leaf, and, with freeing off, a table given back by `free_empty_table`.
/// The summaries are checked after every step. Returns the walker and the
/// zap's end, or `None` where the layout's space is too small.
#[cfg_attr(miri, allow(dead_code))]
fn summarised<'t, L: PageTableLayout>(
    t: &'t Tracked,
    free_tables: bool,
) -> Option<(Walker<'t, L, Tracked>, u64)> {
    let ps = L::PAGE_SIZE;
    let last = L::LEVELS - 1;
    let end = L::entry_span(1) * 300;
    if L::VA_BITS < 64 && end >= 1 << (L::VA_BITS - 1) {
        return None;
    }
    let mut w = Walker::<L, _>::new(t).unwrap();
    w.set_free_empty_tables(free_tables);
    let map = |w: &mut Walker<'t, L, Tracked>, a: u64, n: u64| {
        let frames: Vec<_> = (0..n).map(|i| t.frame(a + i * ps)).collect();
        w.map_range(va(a), Frames::List(&frames), MapFlags::WRITE)
            .unwrap();
        w.check_consistency().unwrap();
    };
    let zap_page = |w: &mut Walker<'t, L, Tracked>, a: u64| {
        let mut g: Gather<_> = Gather::new(t.tlb.on(0));
        w.zap_range(va(a), va(a + ps), &mut Unbounded::new(ps), &mut g)
            .unwrap();
        w.check_consistency().unwrap();
    };
    for l in 1..last {
        let span = L::entry_span(l);
        if L::entries(l) < 256 {
            continue;
        }
        for k in 0..6 {
            map(&mut w, span * (1 + 37 * k) + k * ps, 1);
        }
    }
    // Two pages across a last-level table's end.
    let leaf_table = L::entry_span(last - 1);
    map(&mut w, leaf_table * 60 - ps, 2);
    // A large leaf, where the layout has one of a size the arena holds.
    let big = leaf_table * 90;
    let large = L::leaf_allowed(last - 1) && leaf_table * 3 <= SUM_ARENA;
    if large {
        let pages = leaf_table / ps;
        let block = t.block(pages, leaf_table, big);
        let frames = Frames::Contiguous {
            start: block,
            pages,
        };
        w.map_range_with(va(big), frames, MapFlags::WRITE, MapHint::LargeLeaves)
            .unwrap();
        w.check_consistency().unwrap();
    }
    // Emptied tables under marked groups, and a split.
    zap_page(&mut w, L::entry_span(1) * 38 + ps);
    zap_page(&mut w, leaf_table * 60);
    if large {
        zap_page(&mut w, big + ps);
    }
    if !free_tables {
        let freed = w
            .free_empty_table(va(leaf_table * 60), last, |_, _| {})
            .unwrap();
        assert!(freed, "{}: the emptied table went back", L::NAME);
        w.check_consistency().unwrap();
        map(&mut w, leaf_table * 61 + 3 * ps, 1);
    }
    Some((w, end))
}

/// Skips through summaries kept by every kind of store (and rebuilt by
/// `rescan`) break, visit, charge and free exactly as one by one does.
#[cfg_attr(miri, allow(dead_code))]
fn summaries_skip_what_one_by_one_visits<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    let budgets = [(7, 1), (64, 1), (50, 3), (1 << 20, 1)];
    for free_tables in [true, false] {
        for rescan in [false, true] {
            for (budget, empty) in budgets {
                let mut runs = Vec::new();
                for one_by_one in [false, true] {
                    let t = Tracked::new(SUM_ARENA, ps);
                    let Some((mut w, end)) = summarised::<L>(&t, free_tables) else {
                        return;
                    };
                    if rescan {
                        w.rescan().unwrap();
                        w.check_consistency().unwrap();
                    }
                    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
                    let breaks = std::cell::RefCell::new(Vec::new());
                    let hook = |i: &BreakInfo| breaks.borrow_mut().push(*i);
                    let mut b = WorkBudget::new(budget, empty, ps).with_hook(hook);
                    let r = if one_by_one {
                        w.zap_range(va(0), va(end), &mut OneByOne(&mut b), &mut g)
                    } else {
                        w.zap_range(va(0), va(end), &mut b, &mut g)
                    }
                    .unwrap();
                    w.check_consistency().unwrap();
                    assert!(w.translate(va(L::entry_span(1) * 75 + 2 * ps)).is_none());
                    let freed = t
                        .leaf_pages_freed
                        .load(std::sync::atomic::Ordering::Relaxed);
                    runs.push((
                        breaks.into_inner(),
                        r.entries_visited,
                        r.budget_units,
                        r.leaves_cleared,
                        freed,
                        w.tables_in_use(),
                    ));
                }
                assert_eq!(
                    runs[0],
                    runs[1],
                    "{}: free {free_tables}, rescan {rescan}, budget {budget}, empty {empty}",
                    L::NAME
                );
            }
        }
    }
}
// Native only: eight walkers per layout, each checked after every store,
// take minutes under miri; the summaries' unsafe-free code is the same, and
// `occupancy.rs`'s unit tests run there.
#[cfg(not(miri))]
on_every_layout!(
    summaries_skip_what_one_by_one_visits_test,
    summaries_skip_what_one_by_one_visits
);
