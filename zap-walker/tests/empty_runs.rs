//! Runs of empty entries skipped in one step (`ZapBudget::empty_run`)
//! against the same zap visiting them one by one.

#[macro_use]
mod common;

use arch_api::PageTableLayout;
use common::{Tiny, Tracked, va};
use zap_walker::{BreakInfo, Frames, Gather, MapFlags, Walker, WorkBudget, ZapBudget};

const ARENA: u64 = if cfg!(miri) { 16 << 20 } else { 1 << 30 };

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
