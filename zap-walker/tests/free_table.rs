//! `Walker::free_empty_table` (Linux's `pmd_free_pte_page`): once tables are
//! pinned a zap keeps its empty last-level tables, so a large leaf over a
//! span that once held small mappings needs the table given back first.
//! Only an empty table the walker allocated goes, after a flush naming one
//! page of its span; anything else is left and reported as `Ok(false)`.

#[macro_use]
mod common;

use arch_api::{PageTableLayout, PhysAddr};
use common::{Tiny, Tracked, va};
use zap_walker::{Frames, Gather, MapFlags, MapHint, Unbounded, WalkError, Walker};

const ARENA: u64 = if cfg!(miri) { 16 << 20 } else { 1 << 28 };

fn zap<L: PageTableLayout>(w: &mut Walker<'_, L, Tracked>, t: &Tracked, s: u64, e: u64) {
    let mut g: Gather<_, 8> = Gather::new(t.tlb.on(0));
    w.zap_range(va(s), va(e), &mut Unbounded::new(L::PAGE_SIZE), &mut g)
        .unwrap();
}

/// The large leaf one level above the last, if the layout has one that the
/// arena can hold a few of.
fn leaf_span<L: PageTableLayout>() -> Option<u64> {
    let level = L::LEVELS.checked_sub(2)?;
    let span = L::entry_span(level);
    (L::leaf_allowed(level) && span * 4 <= ARENA).then_some(span)
}

fn map_large<L: PageTableLayout>(
    w: &mut Walker<'_, L, Tracked>,
    t: &Tracked,
    base: u64,
    span: u64,
) {
    let ps = L::PAGE_SIZE;
    let run = t.block(span / ps, span, base);
    let frames = Frames::Contiguous {
        start: run,
        pages: span / ps,
    };
    w.map_range_with(va(base), frames, MapFlags::WRITE, MapHint::LargeLeaves)
        .unwrap();
}

fn gives_way_to_a_large_leaf<L: PageTableLayout>() {
    let Some(span) = leaf_span::<L>() else {
        return;
    };
    let ps = L::PAGE_SIZE;
    let last = L::LEVELS - 1;
    let t = Tracked::new(ARENA, ps);
    let mut w = Walker::<L, _>::new(&t).unwrap();
    // SAFETY: the path is not used after `w` is dropped (it is not used).
    let _lp = unsafe { w.leaf_path() }.unwrap();
    let base = 2 * span;
    // A small mapping in the span, zapped: its table stays (pinned).
    let f = t.frame(base + ps);
    w.map_range(va(base + ps), Frames::List(&[f]), MapFlags::WRITE)
        .unwrap();
    zap(&mut w, &t, base + ps, base + 2 * ps);
    let tables = w.tables_in_use();
    // Without giving it back, a large map goes into the table: base pages.
    map_large(&mut w, &t, base, span);
    assert_eq!(w.translate(va(base)).unwrap().size, ps);
    zap(&mut w, &t, base, base + span);
    assert_eq!(w.tables_in_use(), tables);

    // A table with an entry is kept, untouched, and nothing is flushed.
    let g = t.frame(base + 3 * ps);
    w.map_range(va(base + 3 * ps), Frames::List(&[g]), MapFlags::WRITE)
        .unwrap();
    let r = w.free_empty_table(va(base), last, |_, _| panic!("nothing to flush"));
    assert_eq!(r, Ok(false));
    assert_eq!(w.translate(va(base + 3 * ps)).unwrap().frame, g);
    zap(&mut w, &t, base + 3 * ps, base + 4 * ps);

    // Misuse is an error and changes nothing.
    let none = |_: _, _: _| panic!("nothing to flush");
    assert_eq!(
        w.free_empty_table(va(base + ps), last, none),
        Err(WalkError::Unaligned {
            addr: va(base + ps)
        })
    );
    assert_eq!(
        w.free_empty_table(va(base), 0, none),
        Err(WalkError::Unsupported)
    );
    assert_eq!(
        w.free_empty_table(va(base), L::LEVELS, none),
        Err(WalkError::Unsupported)
    );
    assert_eq!(w.tables_in_use(), tables);

    // The empty table goes, after one flush naming a page of its span.
    let mut flushed = Vec::new();
    let r = w.free_empty_table(va(base), last, |s, e| flushed.push((s, e)));
    assert_eq!(r, Ok(true));
    assert_eq!(flushed, [(va(base), va(base + ps))]);
    assert_eq!(w.tables_in_use(), tables - 1);
    w.check_consistency().unwrap();
    // Gone: nothing to free a second time.
    assert_eq!(w.free_empty_table(va(base), last, none), Ok(false));

    // Now the span takes a large leaf, and zaps as one unit.
    map_large(&mut w, &t, base, span);
    let tr = w.translate(va(base + 5 * ps)).unwrap();
    assert_eq!((tr.size, tr.level), (span, L::LEVELS - 2));
    w.check_consistency().unwrap();
    zap(&mut w, &t, base, base + span);
    assert!(w.translate(va(base)).is_none());
    // A large leaf is no table: nothing to free.
    assert_eq!(w.free_empty_table(va(base), last, none), Ok(false));
    w.check_consistency().unwrap();
    assert_eq!(t.violations.load(std::sync::atomic::Ordering::Relaxed), 0);
}
on_every_layout!(gives_way, gives_way_to_a_large_leaf);

/// A table other code linked stays, empty or not: it is not the walker's.
#[test]
fn a_table_the_walker_did_not_allocate_stays() {
    type L = arch_x86_64::X86_64Pml4;
    let span = leaf_span::<L>().unwrap();
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    // The "kernel" builds the tree: a table in the window, left empty.
    let mut kernel = Walker::<L, _>::new(&t).unwrap();
    kernel.set_free_empty_tables(false);
    let base = 0xffff_c900_0000_0000u64;
    let f = t.frame(base);
    kernel
        .map_range(va(base), Frames::List(&[f]), MapFlags::WRITE)
        .unwrap();
    zap(&mut kernel, &t, base, base + ps);
    let root: PhysAddr = kernel.root(va(base));
    {
        // SAFETY: `root` is `kernel`'s live root, which outlives this
        // walker; nothing else writes inside the window meanwhile.
        let mut w =
            unsafe { Walker::<L, _>::attach(&t, root, va(base)..va(base + 4 * span)) }.unwrap();
        // SAFETY: the path is not used after `w` is dropped (it is not used).
        let _lp = unsafe { w.leaf_path() }.unwrap();
        let tables = kernel.tables_in_use();
        let r = w.free_empty_table(va(base), L::LEVELS - 1, |_, _| panic!("not ours"));
        assert_eq!(r, Ok(false));
        assert_eq!(kernel.tables_in_use(), tables);
        // A table the attached walker made itself is its own to free.
        let next = base + span;
        let g = t.frame(next);
        w.map_range(va(next), Frames::List(&[g]), MapFlags::WRITE)
            .unwrap();
        zap(&mut w, &t, next, next + ps);
        let mut n = 0;
        assert_eq!(
            w.free_empty_table(va(next), L::LEVELS - 1, |_, _| n += 1),
            Ok(true)
        );
        assert_eq!(n, 1);
        w.check_consistency().unwrap();
    }
    assert!(kernel.translate(va(base)).is_none());
}
