//! The zeroed-table stock (`Walker::set_table_stock`): freed tables are
//! reused without the frame source, the bound holds, the accounting stays
//! exact, and nothing is left behind by a drain, a lowered bound or a drop.

#[macro_use]
mod common;

use arch_api::{PageTableLayout, PhysAddr};
use common::{Tiny, Tracked, va};
use std::sync::atomic::Ordering;
use zap_walker::{Frames, Gather, MapFlags, WalkError, Walker, WorkBudget};

const ARENA: u64 = if cfg!(miri) { 16 << 20 } else { 1 << 30 };

/// Maps one page at each of `at`, each its own `map_range`.
fn map_each<L: PageTableLayout>(w: &mut Walker<'_, L, Tracked>, t: &Tracked, at: &[u64]) {
    for &a in at {
        let f = t.frame(a);
        w.map_range(va(a), Frames::List(&[f]), MapFlags::WRITE)
            .unwrap();
    }
}

/// One page in each of three level-1 entries: a table at every level below
/// the root for each, so a zap frees 3 per level (one level-1 table on
/// layouts where they share it).
fn spots<L: PageTableLayout>() -> Vec<u64> {
    let span1 = L::entry_span(1);
    vec![
        span1,
        2 * span1 + 5 * L::PAGE_SIZE,
        3 * span1 - L::PAGE_SIZE,
    ]
}

fn zap_all<L: PageTableLayout, T: arch_api::TlbFlush>(
    w: &mut Walker<'_, L, Tracked>,
    g: &mut Gather<T>,
) {
    let span1 = L::entry_span(1);
    w.zap_range(
        va(span1),
        va(4 * span1),
        &mut WorkBudget::for_page_size(L::PAGE_SIZE, true),
        g,
    )
    .unwrap();
}

/// The arena holds exactly the walker's page-table memory (stock included)
/// plus the `mapped` leaf pages.
fn accounting_exact<L: PageTableLayout>(w: &Walker<'_, L, Tracked>, t: &Tracked, mapped: u64) {
    assert_eq!(
        t.arena.bytes_in_use(),
        w.pagetable_bytes() + mapped * L::PAGE_SIZE,
        "{}: arena bytes = page tables + stock + mapped frames",
        L::NAME
    );
}

/// Freed tables come back from the stock, zeroed, without the frame source.
fn reuse<L: PageTableLayout>() {
    let t = Tracked::new(ARENA, L::PAGE_SIZE);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    w.set_table_stock(8).unwrap();
    let roots = t.arena.frames_in_use();
    let at = spots::<L>();
    map_each(&mut w, &t, &at);
    let tables = w.tables_below_root();
    assert!(tables >= 3, "{}: {tables} tables", L::NAME);
    accounting_exact(&w, &t, 3);
    zap_all(&mut w, &mut g);
    assert_eq!(w.tables_below_root(), 0);
    assert_eq!(w.stocked_tables(), tables, "every freed table is stocked");
    accounting_exact(&w, &t, 0);
    let cycles = if cfg!(miri) { 2 } else { 20 };
    for i in 0..cycles {
        let s = w.stats();
        let held = t.arena.frames_in_use();
        map_each(&mut w, &t, &at);
        let d = w.stats().since(&s);
        assert_eq!(d.tables_allocated, tables, "cycle {i}");
        assert_eq!(d.tables_from_stock, tables, "cycle {i}: all from the stock");
        assert_eq!(
            t.arena.frames_in_use(),
            held + 3 * (L::PAGE_SIZE / 4096),
            "cycle {i}: only the leaf frames came from the source"
        );
        assert_eq!(w.stocked_tables(), 0);
        w.check_consistency().unwrap();
        for &a in &at {
            assert!(w.translate(va(a + 8)).is_some(), "cycle {i}: {a:#x}");
            assert_eq!(w.translate(va(a + L::PAGE_SIZE)), None, "stale entry");
        }
        accounting_exact(&w, &t, 3);
        zap_all(&mut w, &mut g);
        accounting_exact(&w, &t, 0);
    }
    w.drain_table_stock().unwrap();
    assert_eq!(w.stocked_tables(), 0);
    assert_eq!(t.arena.frames_in_use(), roots, "drained: only the roots");
    accounting_exact(&w, &t, 0);
    assert_eq!(t.violations.load(Ordering::Relaxed), 0);
}
on_every_layout!(stock_reuses_freed_tables, reuse);

/// The bound holds per level; the excess goes back to the source, lowering
/// the bound returns the surplus at once, and a drop returns the rest.
fn bound<L: PageTableLayout>() {
    let t = Tracked::new(ARENA, L::PAGE_SIZE);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let roots = t.arena.frames_in_use();
    w.set_table_stock(1).unwrap();
    assert_eq!(w.table_stock_limit(), 1);
    map_each(&mut w, &t, &spots::<L>());
    zap_all(&mut w, &mut g);
    let levels_below_root = L::LEVELS as u64 - 1;
    assert!(
        w.stocked_tables() <= levels_below_root,
        "{}: {} stocked with a bound of 1 per level",
        L::NAME,
        w.stocked_tables()
    );
    assert!(w.stocked_tables() >= 1);
    accounting_exact(&w, &t, 0);
    w.set_table_stock(0).unwrap();
    assert_eq!(w.stocked_tables(), 0, "lowering the bound trims the stock");
    accounting_exact(&w, &t, 0);
    // The side store of live counts, empty now, goes back on a drain.
    w.drain_table_stock().unwrap();
    assert_eq!(t.arena.frames_in_use(), roots);
    // Off: freed tables go straight back.
    map_each(&mut w, &t, &spots::<L>());
    zap_all(&mut w, &mut g);
    assert_eq!(w.stocked_tables(), 0);
    w.drain_table_stock().unwrap();
    assert_eq!(t.arena.frames_in_use(), roots);
    // A drop with a full stock and live mappings returns everything.
    w.set_table_stock(4).unwrap();
    map_each(&mut w, &t, &spots::<L>());
    zap_all(&mut w, &mut g);
    assert!(w.stocked_tables() > 0);
    map_each(&mut w, &t, &spots::<L>()[..1]);
    drop(w);
    assert_eq!(t.arena.frames_in_use(), 0, "drop returns stock and tables");
    assert_eq!(t.violations.load(Ordering::Relaxed), 0);
}
on_every_layout!(stock_is_bounded_and_never_leaks, bound);

/// With the source refusing every allocation, maps are served from the
/// stock alone; the one that finds the stock dry fails cleanly (its reserve
/// goes back to the stock, nothing is left mapped) and a zap brings the
/// walker back to where it was.
fn exhaustion<L: PageTableLayout>() {
    let t = Tracked::new(ARENA, L::PAGE_SIZE);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    w.set_table_stock(8).unwrap();
    map_each(&mut w, &t, &spots::<L>());
    zap_all(&mut w, &mut g);
    let stocked = w.stocked_tables();
    let before = (w.tables_in_use(), stocked, t.arena.frames_in_use());
    // Each map one leaf table's span apart: each needs at least one table,
    // so `stocked + 2` of them must run the stock dry.
    let step = L::entry_span(L::LEVELS - 2);
    let far = 4 * L::entry_span(1);
    let many: Vec<u64> = (0..stocked + 2).map(|i| far + i * step).collect();
    let fr: Vec<PhysAddr> = many.iter().map(|&a| t.frame(a)).collect();
    t.allow_allocs.store(0, Ordering::Relaxed);
    let mut failed = false;
    for (i, &a) in many.iter().enumerate() {
        match w.map_range(va(a), Frames::List(&fr[i..i + 1]), MapFlags::WRITE) {
            Ok(()) => assert!(w.translate(va(a)).is_some()),
            Err(WalkError::OutOfTables(_)) => {
                failed = true;
                assert_eq!(w.translate(va(a)), None, "nothing left mapped");
                for f in &fr[i..] {
                    t.give_back(*f);
                }
                break;
            }
            Err(e) => panic!("{e}"),
        }
        assert_eq!(
            w.tables_in_use() + w.stocked_tables(),
            before.0 + before.1,
            "{}: tables only move between the stock and the tree",
            L::NAME
        );
    }
    assert!(failed, "{}: the stock ran dry", L::NAME);
    assert_eq!(w.tables_in_use() + w.stocked_tables(), before.0 + before.1);
    assert!(w.stats().tables_from_stock > 0);
    w.check_consistency().unwrap();
    t.allow_allocs.store(u64::MAX, Ordering::Relaxed);
    w.zap_range(
        va(far),
        va(far + (stocked + 2) * step),
        &mut WorkBudget::for_page_size(L::PAGE_SIZE, false),
        &mut g,
    )
    .unwrap();
    assert_eq!(
        (
            w.tables_in_use(),
            w.stocked_tables(),
            t.arena.frames_in_use()
        ),
        before,
        "{}: back where it was",
        L::NAME
    );
    drop(w);
    assert_eq!(t.arena.frames_in_use(), 0);
    assert_eq!(t.violations.load(Ordering::Relaxed), 0);
}
on_every_layout!(stock_survives_exhaustion, exhaustion);
