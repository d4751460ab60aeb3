//! Targeted tests: errors, boundaries, the lock-break bound, sparse ranges,
//! table leaks, large leaves, the gather.

#[macro_use]
mod common;

use arch_api::{PageTableLayout, PhysAddr};
use common::{Tiny, Tracked, low_top, va};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use zap_walker::{
    AddressBudget, BreakInfo, Frames, Gather, MapFlags, MapHint, Unbounded, WalkError, Walker,
    WorkBudget,
};

const ARENA: u64 = if cfg!(miri) { 16 << 20 } else { 1 << 30 };

fn map_pages<L: PageTableLayout>(
    w: &mut Walker<'_, L, Tracked>,
    t: &Tracked,
    start: u64,
    n: u64,
) -> Vec<PhysAddr> {
    let ps = L::PAGE_SIZE;
    let frames: Vec<PhysAddr> = (0..n).map(|i| t.frame(start + i * ps)).collect();
    w.map_range(va(start), Frames::List(&frames), MapFlags::WRITE)
        .unwrap();
    frames
}

/// Typed errors, and a failed map changes nothing.
fn errors<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let b = &mut Unbounded::new(ps);
    let base = L::entry_span(1);
    let f = t.frame(base);
    assert_eq!(
        w.map_range(va(base + 8), Frames::List(&[f]), MapFlags::WRITE),
        Err(WalkError::Unaligned { addr: va(base + 8) })
    );
    assert_eq!(
        w.map_range(
            va(base),
            Frames::List(&[PhysAddr::new(f.as_u64() + 8)]),
            MapFlags::WRITE
        ),
        Err(WalkError::UnalignedFrame {
            frame: PhysAddr::new(f.as_u64() + 8)
        })
    );
    let top = low_top::<L>();
    assert!(matches!(
        w.map_range(va(top), Frames::List(&[f]), MapFlags::WRITE),
        Err(WalkError::NonCanonical { .. })
    ));
    // A range across the hole above the low half (x86_64 47/56 bits, aarch64
    // 48 bits, ia64 the end of region 0's tree).
    assert!(matches!(
        w.zap_range(va(top - ps), va(top + ps), b, &mut g),
        Err(WalkError::NonCanonical { .. })
    ));
    assert!(matches!(
        w.zap_range(va(0), va(!(ps - 1)), b, &mut g),
        Err(WalkError::NonCanonical { .. })
    ));
    assert_eq!(
        w.zap_range(va(2 * ps), va(ps), b, &mut g),
        Err(WalkError::Wraps { start: va(2 * ps) })
    );
    let last_page = !(ps - 1);
    assert_eq!(
        w.map_range(
            va(last_page),
            Frames::Contiguous { start: f, pages: 2 },
            MapFlags::WRITE
        ),
        Err(WalkError::Wraps {
            start: va(last_page)
        })
    );
    // Over an existing mapping: error, nothing changed.
    w.map_range(va(base + ps), Frames::List(&[f]), MapFlags::WRITE)
        .unwrap();
    let before = (w.tables_in_use(), t.arena.frames_in_use());
    let fs: Vec<_> = (0..3).map(|i| t.frame(base + i * ps)).collect();
    let before_frames = t.arena.frames_in_use();
    assert_eq!(
        w.map_range(va(base), Frames::List(&fs), MapFlags::WRITE),
        Err(WalkError::AlreadyMapped {
            addr: va(base + ps)
        })
    );
    assert_eq!(w.tables_in_use(), before.0);
    assert_eq!(t.arena.frames_in_use(), before_frames);
    assert_eq!(w.translate(va(base)), None);
    assert_eq!(w.translate(va(base + 2 * ps)), None);
    for x in fs {
        t.give_back(x);
    }
    w.zap_range(va(base), va(base + 4 * ps), b, &mut g).unwrap();
    assert_eq!(t.freed(f), 1);
    assert_eq!(w.tables_below_root(), 0);
}
on_every_layout!(errors_are_typed, errors);

/// Maps `fs` at `start`, first with the source allowed 0 allocations, then
/// 1, 2, …: every failure must be `OutOfTables` with nothing mapped, no
/// table kept and no frame leaked. Returns the allocations the map needed.
fn map_as_the_source_runs_dry<L: PageTableLayout>(
    t: &Tracked,
    w: &mut Walker<'_, L, Tracked>,
    start: u64,
    fs: &[PhysAddr],
) -> u64 {
    let ps = L::PAGE_SIZE;
    let (base_frames, base_tables) = (t.arena.frames_in_use(), w.tables_in_use());
    for k in 0.. {
        t.allow_allocs.store(k, Ordering::Relaxed);
        match w.map_range(va(start), Frames::List(fs), MapFlags::WRITE) {
            Err(WalkError::OutOfTables(_)) => {
                assert_eq!(w.tables_in_use(), base_tables, "k={k}: tables rolled back");
                assert_eq!(
                    t.arena.frames_in_use(),
                    base_frames,
                    "k={k}: nothing leaked"
                );
                for i in 0..fs.len() as u64 {
                    assert_eq!(
                        w.translate(va(start + i * ps)),
                        None,
                        "k={k}: nothing mapped"
                    );
                }
                w.check_consistency().unwrap();
            }
            Ok(()) => {
                t.allow_allocs.store(u64::MAX, Ordering::Relaxed);
                w.check_consistency().unwrap();
                return k;
            }
            Err(e) => panic!("{e}"),
        }
    }
    unreachable!()
}

/// The frame source runs dry at every possible point of a map that needs
/// several tables: typed error, nothing mapped, nothing leaked.
fn exhaustion<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    let mut w = Walker::<L, _>::new(&t).unwrap();
    // Straddle a level-1 boundary: two tables at every level below 1.
    let start = L::entry_span(1) * 3 - 2 * ps;
    let fs: Vec<_> = (0..4).map(|i| t.frame(start + i * ps)).collect();
    assert_eq!(
        map_as_the_source_runs_dry(&t, &mut w, start, &fs) as usize,
        2 * (L::LEVELS - 2) + 1 + 1,
        "tables needed across the boundary, and the side store of counts"
    );
}
on_every_layout!(exhaustion_rolls_back, exhaustion);

/// The same for a map inside one last-level table (the one-descent path):
/// every table below the root missing, the source running dry at each.
fn exhaustion_in_one_table<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let start = L::entry_span(L::LEVELS - 2) * 5 + ps;
    let fs: Vec<_> = (0..4).map(|i| t.frame(start + i * ps)).collect();
    assert_eq!(
        map_as_the_source_runs_dry(&t, &mut w, start, &fs) as usize,
        L::LEVELS - 1 + 1,
        "one table per level below the root, and the side store of counts"
    );
    for (i, f) in fs.iter().enumerate() {
        assert_eq!(
            w.translate(va(start + i as u64 * ps)).map(|x| x.frame),
            Some(*f)
        );
    }
    // A second map into the same table takes no table and counts its pages.
    let more: Vec<_> = (0..2).map(|i| t.frame(start + (4 + i) * ps)).collect();
    let tables = w.tables_in_use();
    w.map_range(va(start + 4 * ps), Frames::List(&more), MapFlags::WRITE)
        .unwrap();
    assert_eq!(w.tables_in_use(), tables);
    w.check_consistency().unwrap();
    let b = &mut Unbounded::new(ps);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    w.zap_range(va(start), va(start + 6 * ps), b, &mut g)
        .unwrap();
    assert_eq!(w.tables_below_root(), 0, "the counts let every table go");
    for f in fs.iter().chain(&more) {
        assert_eq!(t.freed(*f), 1);
    }
}
on_every_layout!(exhaustion_in_one_table_rolls_back, exhaustion_in_one_table);

/// Dense mapping: the work between two calls of the hook never exceeds the
/// budget plus one page's weight, measured by the hook itself from the frames
/// that came back (each a page's weight) and the walker's report.
fn lock_break_bound<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let n = if cfg!(miri) || L::VA_BITS < 32 {
        100
    } else {
        3000
    };
    let start = 2 * L::entry_span(1) - 37 * ps;
    map_pages(&mut w, &t, start, n);
    for preempt in [true, false] {
        let last_frees = Cell::new(t.leaf_pages_freed.load(Ordering::Relaxed));
        let max_seen = Cell::new(0u64);
        let breaks = Cell::new(0u64);
        let hook = |info: &BreakInfo| {
            // Frames returned since the last break: the gather was finished.
            let now = t.leaf_pages_freed.load(Ordering::Relaxed);
            let pages = now - last_frees.get();
            last_frees.set(now);
            max_seen.set(max_seen.get().max(pages * ps).max(info.units_since_break));
            breaks.set(breaks.get() + 1);
        };
        let mut b = WorkBudget::for_page_size(ps, preempt).with_hook(hook);
        let budget = b.budget();
        let end = if preempt {
            start + n / 2 * ps
        } else {
            start + n * ps
        };
        let begin = if preempt { start } else { start + n / 2 * ps };
        let r = w.zap_range(va(begin), va(end), &mut b, &mut g).unwrap();
        if preempt || n > 2048 {
            assert!(breaks.get() > 0, "{}: breaks happened", L::NAME);
        }
        assert_eq!(r.lock_breaks, breaks.get());
        assert!(
            max_seen.get() <= budget + ps,
            "{}: {} > {budget} + {ps}",
            L::NAME,
            max_seen.get()
        );
        assert!(r.max_work_between_breaks <= budget + ps);
    }
    assert_eq!(w.tables_below_root(), 0);
}
on_every_layout!(lock_break_bound_holds, lock_break_bound);

/// Sparse: unmapping a huge untouched range visits O(populated entries),
/// while the `address` policy visits one entry per block at least.
fn sparse<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let top = low_top::<L>();
    let size = (16u64 << 40).min(top / 2);
    let start = size.min(top - size);
    // A few pages populated inside, and some outside it.
    let inside = [
        start + 5 * ps,
        start + ((size / 3) & !(ps - 1)),
        start + size - ps,
    ];
    for &a in &inside {
        map_pages(&mut w, &t, a, 2.min((start + size - a) / ps));
    }
    map_pages(&mut w, &t, start - ps, 1);
    let r = w
        .zap_range(
            va(start),
            va(start + size),
            &mut WorkBudget::for_page_size(ps, true),
            &mut g,
        )
        .unwrap();
    // Each populated spot costs at most one table's worth of entries at each
    // level below the root (the empty entries before it in its tables), plus
    // the root entries of the range: nothing proportional to the range.
    let per_spot: u64 = (1..L::LEVELS).map(|l| L::entries(l) as u64).sum();
    let bound = (inside.len() as u64 + 1) * per_spot + L::entries(0) as u64;
    assert!(
        r.entries_visited <= bound,
        "{}: visited {} > {bound}",
        L::NAME,
        r.entries_visited
    );
    assert_eq!(r.leaves_cleared, 5, "2 + 2 + 1 pages inside");
    assert!(w.translate(va(start - ps)).is_some());
    // The pre-2005 policy on a range that is merely 4096 blocks long already
    // visits at least one entry per block.
    let blocks = 4096.min(size / (8 * ps));
    let len = blocks * 8 * ps;
    let a = w
        .zap_range(
            va(start),
            va(start + len),
            &mut AddressBudget::for_page_size(ps, true),
            &mut g,
        )
        .unwrap();
    assert!(
        a.entries_visited >= blocks,
        "{}: address visited {}",
        L::NAME,
        a.entries_visited
    );
    assert_eq!(a.lock_breaks, blocks - 1);
    w.zap_range(va(start - ps), va(start), &mut Unbounded::new(ps), &mut g)
        .unwrap();
    assert_eq!(w.tables_below_root(), 0);
}
on_every_layout!(sparse_is_o_populated, sparse);

/// Map/unmap cycles leak no table page with freeing on; with it off the
/// tables stay and are reused.
fn no_leak<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let roots = t.arena.frames_in_use();
    let cycles = if cfg!(miri) { 3 } else { 50 };
    let span1 = L::entry_span(1);
    for i in 0..cycles {
        let a = span1 * (1 + i % 3) - (i % 7 + 1) * ps;
        map_pages(&mut w, &t, a, 3 + i % 5);
        w.zap_range(
            va(span1),
            va(span1 * 4),
            &mut WorkBudget::for_page_size(ps, true),
            &mut g,
        )
        .unwrap();
        w.zap_range(
            va(0),
            va(span1),
            &mut WorkBudget::for_page_size(ps, false),
            &mut g,
        )
        .unwrap();
        assert_eq!(w.tables_below_root(), 0, "{}: cycle {i}", L::NAME);
        // The roots and the (kept) side store of counts, nothing else.
        assert_eq!(t.arena.bytes_in_use(), w.pagetable_bytes());
    }
    w.drain_table_stock().unwrap();
    assert_eq!(t.arena.frames_in_use(), roots);
    w.set_free_empty_tables(false);
    map_pages(&mut w, &t, span1, 4);
    let kept = w.tables_in_use();
    for _ in 0..cycles {
        w.zap_range(
            va(span1),
            va(span1 + 4 * ps),
            &mut Unbounded::new(ps),
            &mut g,
        )
        .unwrap();
        assert_eq!(w.tables_in_use(), kept, "empty tables kept");
        map_pages(&mut w, &t, span1, 4);
        assert_eq!(w.tables_in_use(), kept, "and reused");
    }
    w.check_consistency().unwrap();
    drop(w);
    assert_eq!(
        t.arena.frames_in_use(),
        0,
        "drop frees tables and mapped frames"
    );
    assert_eq!(t.violations.load(Ordering::Relaxed), 0);
}
on_every_layout!(no_table_leak, no_leak);

/// Large leaves: zapped as one unit when covered, split (repeatedly, down to
/// base pages) when covered in part.
fn large<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    let Some(l) = (1..L::LEVELS - 1).find(|&l| L::leaf_allowed(l) && L::entry_span(l) <= ARENA / 4)
    else {
        return; // ia64-sim: base pages only
    };
    let span = L::entry_span(l);
    let pages = span / ps;
    let t = Tracked::new(ARENA, ps);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let start = span * 3;
    let map = |w: &mut Walker<'_, L, Tracked>| {
        let f = t.block(pages, span, start);
        w.map_range_with(
            va(start),
            Frames::Contiguous { start: f, pages },
            MapFlags::WRITE,
            MapHint::LargeLeaves,
        )
        .unwrap();
        f
    };
    // Whole: one leaf, one frame record, one unit of page weight.
    let f = map(&mut w);
    assert_eq!(w.translate(va(start + 3 * ps)).unwrap().level, l);
    assert_eq!(
        w.translate(va(start + 3 * ps)).unwrap().phys.as_u64(),
        f.as_u64() + 3 * ps
    );
    let gs = g.stats();
    let r = w
        .zap_range(va(start), va(start + span), &mut Unbounded::new(ps), &mut g)
        .unwrap();
    assert_eq!((r.leaves_cleared, r.splits), (1, 0));
    assert_eq!(g.stats().frames_freed - gs.frames_freed, 1);
    assert_eq!(t.freed(f), 1);
    // Part: split, the rest stays mapped to the same frames.
    let f = map(&mut w);
    let hole = start + span / 2 + ps;
    t.tlb.touch(1, va(hole));
    let r = w
        .zap_range(
            va(hole),
            va(hole + 2 * ps),
            &mut WorkBudget::for_page_size(ps, true),
            &mut g,
        )
        .unwrap();
    assert!(r.splits >= 1);
    assert!(!t.tlb.may_hold(va(hole), va(hole + ps)));
    for p in [start, hole - ps, hole + 2 * ps, start + span - ps] {
        let tr = w.translate(va(p)).unwrap();
        assert_eq!(tr.phys.as_u64(), f.as_u64() + (p - start), "{p:#x}");
    }
    assert_eq!(w.translate(va(hole)), None);
    assert_eq!(w.translate(va(hole + ps)), None);
    assert_eq!(t.freed(PhysAddr::new(f.as_u64() + (hole - start))), 1);
    assert_eq!(t.freed(f), 0);
    w.check_consistency().unwrap();
    w.zap_range(va(start), va(start + span), &mut Unbounded::new(ps), &mut g)
        .unwrap();
    assert_eq!(w.tables_below_root(), 0);
    assert_eq!(t.freed(f), 1);
    assert_eq!(t.violations.load(Ordering::Relaxed), 0);
}
on_every_layout!(large_leaves, large);

/// Device mappings are unmapped but not freed; a refused free is reported.
#[test]
fn device_frames_are_not_freed_and_refused_frees_are_reported() {
    let t = Tracked::new(16 << 20, 4096);
    let mut g: Gather<_, 1> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<Tiny, _>::new(&t).unwrap();
    let mmio = PhysAddr::new(0x10_0000); // outside the arena
    w.map_range(va(0x4000), Frames::List(&[mmio]), MapFlags::DEVICE)
        .unwrap();
    w.map_range(va(0x8000), Frames::List(&[mmio]), MapFlags::WRITE)
        .unwrap();
    w.zap_range(va(0x4000), va(0x5000), &mut Unbounded::new(4096), &mut g)
        .unwrap();
    assert_eq!(w.translate(va(0x4000)), None);
    let r = w.zap_range(va(0x8000), va(0x9000), &mut Unbounded::new(4096), &mut g);
    assert!(matches!(r, Err(WalkError::FreeFailed { frame, .. }) if frame == mmio));
    assert_eq!(w.translate(va(0x8000)), None);
    assert_eq!(w.tables_below_root(), 0);
}

/// A gather of one record still flushes before every free.
#[test]
fn tiny_gather_flushes_before_each_free() {
    let t = Tracked::new(16 << 20, 4096);
    let mut g: Gather<_, 1> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<Tiny, _>::new(&t).unwrap();
    map_pages(&mut w, &t, 0x1000, 40);
    for p in 0..40 {
        t.tlb.touch(1, va(0x1000 + p * 4096));
    }
    w.zap_range(va(0), va(0x40000), &mut Unbounded::new(4096), &mut g)
        .unwrap();
    assert_eq!(t.violations.load(Ordering::Relaxed), 0);
    assert!(g.stats().batches >= 40);
    assert_eq!(g.stats().frames_freed, 40);
    assert_eq!(w.tables_below_root(), 0);
}

/// Freeing the tables above a few cleared pages does not widen the flush:
/// the 2005 cycle (a few pages inside a huge range) flushes those pages, not
/// everything, and the pages' frames and the tables still come back after
/// it.
fn sparse_flush<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let span1 = L::entry_span(1);
    let frames = map_pages(&mut w, &t, span1, 4);
    for p in 0..4 {
        t.tlb.touch(1, va(span1 + p * ps));
    }
    let r = w
        .zap_range(va(0), va(4 * span1), &mut Unbounded::new(ps), &mut g)
        .unwrap();
    assert!(r.tables_freed >= 1, "{}: tables freed", L::NAME);
    assert_eq!(w.tables_below_root(), 0);
    let s = t.tlb.stats();
    assert_eq!(
        (s.flush_events, s.full_flushes, s.pages_flushed),
        (1, 0, 4),
        "{}: one 4-page range flush",
        L::NAME
    );
    for f in frames {
        assert_eq!(t.freed(f), 1);
    }
    assert_eq!(t.violations.load(Ordering::Relaxed), 0);
}
on_every_layout!(freed_tables_do_not_widen_the_flush, sparse_flush);

/// ia64-sim: the two sides of the region boundary are separate, and a range
/// across it is rejected.
#[test]
#[cfg_attr(miri, ignore = "16 KiB tables: too slow under miri; covered natively")]
fn ia64_region_boundary() {
    type L = arch_ia64_sim::Ia64Sim;
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let r0_end = 1u64 << 55;
    let r1 = 1u64 << 61;
    let a = map_pages(&mut w, &t, r0_end - 3 * ps, 3);
    let b = map_pages(&mut w, &t, r1, 3);
    assert_eq!(w.translate(va(r0_end - ps)).unwrap().frame, a[2]);
    assert_eq!(w.translate(va(r1)).unwrap().frame, b[0]);
    assert!(matches!(
        w.zap_range(
            va(r0_end - ps),
            va(r1 + ps),
            &mut Unbounded::new(ps),
            &mut g
        ),
        Err(WalkError::NonCanonical { .. })
    ));
    w.zap_range(
        va(r0_end - 2 * ps),
        va(r0_end),
        &mut Unbounded::new(ps),
        &mut g,
    )
    .unwrap();
    assert_eq!(w.translate(va(r1)).unwrap().frame, b[0]);
    assert_eq!(w.translate(va(r0_end - 3 * ps)).unwrap().frame, a[0]);
    w.zap_range(va(r1), va(r1 + 3 * ps), &mut Unbounded::new(ps), &mut g)
        .unwrap();
    w.zap_range(
        va(r0_end - 3 * ps),
        va(r0_end),
        &mut Unbounded::new(ps),
        &mut g,
    )
    .unwrap();
    assert_eq!(w.tables_below_root(), 0);
}

/// aarch64: the TTBR0 and TTBR1 halves have their own roots; the same low
/// 48 bits in each half are different pages.
#[test]
fn aarch64_halves_do_not_alias() {
    type L = arch_aarch64::Aarch64Granule4K;
    let t = Tracked::new(ARENA, 4096);
    let mut g: Gather<_> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    assert_eq!(w.roots().len(), 2);
    let lo = map_pages(&mut w, &t, 0x0000_8000_0000_0000, 1);
    let hi = map_pages(&mut w, &t, 0xffff_8000_0000_0000, 1);
    assert_eq!(w.translate(va(0x0000_8000_0000_0000)).unwrap().frame, lo[0]);
    assert_eq!(w.translate(va(0xffff_8000_0000_0000)).unwrap().frame, hi[0]);
    w.zap_range(
        va(0xffff_8000_0000_0000),
        va(0xffff_8000_0000_1000),
        &mut Unbounded::new(4096),
        &mut g,
    )
    .unwrap();
    assert_eq!(w.translate(va(0x0000_8000_0000_0000)).unwrap().frame, lo[0]);
    assert_eq!(
        Walker::<arch_x86_64::X86_64Pml4, _>::new(&t)
            .unwrap()
            .roots()
            .len(),
        1
    );
}

/// Issue 20's bug: a large leaf the zap covers whole is one unit under every
/// budget, also the `address` policy's, whose 8-page blocks start at the
/// zap's start (here one page below the leaf) and so end inside it. Unmapping
/// the leaf plus one page either side with no frame left to split it must
/// clear it as one leaf (it failed with `SplitFailed`).
fn covered_large_leaf_is_one_unit_under_every_budget<L: PageTableLayout>() {
    let ps = L::PAGE_SIZE;
    for l in (1..L::LEVELS - 1).filter(|&l| L::leaf_allowed(l) && L::entry_span(l) <= ARENA / 2) {
        let span = L::entry_span(l);
        let pages = span / ps;
        let start = span * 3;
        let (lo, hi) = (start - ps, start + span + ps);
        for budget in 0..3 {
            let t = Tracked::new(ARENA, ps);
            let mut g: Gather<_> = Gather::new(t.tlb.on(0));
            let mut w = Walker::<L, _>::new(&t).unwrap();
            let below = t.frame(start - ps);
            let above = t.frame(start + span);
            let block = t.block(pages, span, start);
            for (at, f, n) in [(start - ps, below, 1), (start + span, above, 1)] {
                w.map_range(
                    va(at),
                    Frames::Contiguous { start: f, pages: n },
                    MapFlags::WRITE,
                )
                .unwrap();
            }
            w.map_range_with(
                va(start),
                Frames::Contiguous {
                    start: block,
                    pages,
                },
                MapFlags::WRITE,
                MapHint::LargeLeaves,
            )
            .unwrap();
            assert_eq!(w.translate(va(start)).unwrap().level, l);
            // No frame left: a split would fail.
            t.allow_allocs.store(0, Ordering::Relaxed);
            let r = match budget {
                0 => w.zap_range(
                    va(lo),
                    va(hi),
                    &mut AddressBudget::for_page_size(ps, true),
                    &mut g,
                ),
                1 => w.zap_range(
                    va(lo),
                    va(hi),
                    &mut WorkBudget::for_page_size(ps, true),
                    &mut g,
                ),
                _ => w.zap_range(va(lo), va(hi), &mut Unbounded::new(ps), &mut g),
            };
            let r = r.unwrap_or_else(|e| panic!("level {l}, budget {budget}: {e:?}"));
            assert_eq!(
                (r.splits, r.leaves_cleared),
                (0, 3),
                "level {l}, budget {budget}"
            );
            for f in [below, above, block] {
                assert_eq!(t.freed(f), 1, "level {l}, budget {budget}");
            }
            assert_eq!(w.tables_below_root(), 0);
            assert_eq!(t.violations.load(Ordering::Relaxed), 0);
            w.check_consistency().unwrap();
        }
    }
}
on_every_layout!(
    covered_large_leaf_under_address_blocks,
    covered_large_leaf_is_one_unit_under_every_budget
);
