//! A gather that chains batch pages (issue 20): one flush per lock break
//! rather than one per fixed batch, every frame freed once and only after
//! the flush that covers it, the chained pages back at the source, and a
//! source with no page to spare costing flushes, nothing else.

#[macro_use]
mod common;

use arch_api::PageTableLayout;
use common::{Tiny, Tracked, va};
use std::sync::atomic::Ordering;
use zap_walker::{BreakInfo, Frames, Gather, MAX_CHAIN_PAGES, MapFlags, Walker, WorkBudget};

const ARENA: u64 = if cfg!(miri) { 16 << 20 } else { 1 << 30 };
/// Pages mapped and zapped (fewer where the layout's space is smaller).
const PAGES: u64 = if cfg!(miri) { 100 } else { 1500 };
/// The fixed batch: small, so that every layout chains.
const BATCH: usize = 16;

/// Pages `dense_zap` maps on layout `L`.
fn pages<L: PageTableLayout>() -> u64 {
    PAGES.min(L::entry_span(0) * L::entries(0) as u64 / L::PAGE_SIZE / 2)
}

/// Maps `pages` pages, touches them on CPU 1, zaps them (breaking after 2/5
/// of them) with a gather of a `BATCH`-record batch chaining `chain` pages;
/// the gather's stats and the number of lock breaks.
fn dense_zap<L: PageTableLayout>(chain: usize, dry: bool) -> (zap_walker::GatherStats, u64) {
    let pages = pages::<L>();
    zap_with::<L>(0, pages, pages * 2 / 5, chain, dry, false)
}

/// [`dense_zap`] of `pages` pages from page `first`, breaking after every
/// `every` pages, the gather kept across breaks if `across`.
fn zap_with<L: PageTableLayout>(
    first: u64,
    pages: u64,
    every: u64,
    chain: usize,
    dry: bool,
    across: bool,
) -> (zap_walker::GatherStats, u64) {
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let start = first * ps;
    let f = t.block(pages, ps, start);
    w.map_range(
        va(start),
        Frames::Contiguous { start: f, pages },
        MapFlags::WRITE,
    )
    .unwrap();
    for p in 0..pages {
        t.tlb.touch(1, va(start + p * ps));
    }
    if dry {
        t.allow_allocs.store(0, Ordering::Relaxed);
    }
    let mut g: Gather<_, BATCH> = Gather::new(t.tlb.on(0)).with_chain(chain);
    if across {
        g = g.across_breaks();
    }
    let mut breaks = 0u64;
    let mut b = WorkBudget::new(every * ps, 1, ps).with_hook(|_: &BreakInfo| breaks += 1);
    let end = start + pages * ps;
    w.zap_range(va(start), va(end), &mut b, &mut g).unwrap();
    let s = g.stats();
    assert_eq!(
        t.violations.load(Ordering::Relaxed),
        0,
        "freed before flush"
    );
    assert_eq!(s.frames_freed, pages);
    assert_eq!(t.leaf_pages_freed.load(Ordering::Relaxed), pages);
    assert_eq!(t.freed(f), 1);
    assert_eq!(w.tables_below_root(), 0);
    // The chained pages went back: the arena holds the walker's own memory.
    assert_eq!(t.arena.bytes_in_use(), w.pagetable_bytes());
    (s, breaks)
}

fn once_per_budget<L: PageTableLayout>() {
    let (s, breaks) = dense_zap::<L>(MAX_CHAIN_PAGES, false);
    assert!(breaks >= 2, "the zap spans several budgets");
    assert_eq!(s.flushes, breaks + 1, "one flush per budget: {s:?}");
    assert!(s.chained_pages > breaks);
    // Without the chain: a flush per fixed batch.
    let (u, ub) = dense_zap::<L>(0, false);
    assert_eq!(ub, breaks);
    assert!(u.flushes >= pages::<L>() / BATCH as u64, "{u:?}");
    assert_eq!(u.chained_pages, 0);
    // A source with no page to spare: the same as without the chain.
    let (d, db) = dense_zap::<L>(MAX_CHAIN_PAGES, true);
    assert_eq!((d.flushes, d.chained_pages, db), (u.flushes, 0, breaks));
}
on_every_layout!(a_chained_gather_flushes_once_per_budget, once_per_budget);

/// A chain shorter than a budget's records ends the batch when full, and
/// still frees nothing before its flush.
#[test]
#[cfg_attr(miri, ignore = "needs more records per budget than a page holds")]
fn a_full_chain_ends_the_batch() {
    let (s, breaks) = dense_zap::<arch_x86_64::X86_64Pml4>(1, false);
    assert!(s.flushes > breaks + 1, "{s:?}");
    assert!(s.chained_pages >= 1);
}

/// Kept across lock breaks, a dense zap whose tables lie inside its range
/// flushes once at its end, not once per budget, and still frees nothing
/// before the flush that covers it (`dense_zap`'s checks).
fn across_breaks<L: PageTableLayout>() {
    let pages = pages::<L>();
    let (per_budget, breaks) = zap_with::<L>(0, pages, pages / 10, MAX_CHAIN_PAGES, false, false);
    assert!(breaks >= 5, "the zap spans several budgets");
    assert_eq!(per_budget.flushes, breaks + 1);
    let (s, b) = zap_with::<L>(0, pages, pages / 10, MAX_CHAIN_PAGES, false, true);
    assert_eq!(b, breaks, "the same lock breaks");
    // One flush per full chain; the layouts with pages of 4 KiB or more
    // chain every record of the zap, so one flush in all.
    let per_page = (L::PAGE_SIZE / 16) as usize;
    let room = (BATCH + MAX_CHAIN_PAGES * per_page) as u64;
    assert!(s.flushes <= pages.div_ceil(room) + 1, "{s:?}");
    if room > 2 * pages {
        assert_eq!(s.flushes, 1, "{s:?}");
    }
    // Without the chain, still a flush per fixed batch: the option adds
    // no flush and saves the ones the breaks made.
    let (u, _) = zap_with::<L>(0, pages, pages / 10, 0, false, true);
    assert!(u.flushes >= pages / BATCH as u64, "{u:?}");
}
on_every_layout!(
    a_gather_kept_across_breaks_flushes_per_full_chain,
    across_breaks
);

/// A last-level table whose span reaches below the zap's range (the range
/// starts in its middle) is unlinked when the walk leaves it: the next
/// lock break ends the batch, since another mapping could take the
/// table's place during the break. The table that reaches past the end
/// goes at the end of the zap, with the final flush.
#[test]
#[cfg_attr(miri, ignore = "needs more records per budget than a page holds")]
fn a_table_reaching_outside_the_range_is_flushed_before_the_break() {
    type L = arch_x86_64::X86_64Pml4;
    // Pages 256..1280 of a 2 MiB-aligned start: tables of 512 pages
    // [0, 512) (half outside), [512, 1024) (inside), [1024, 1536) (the
    // rest outside).
    let (s, breaks) = zap_with::<L>(256, 1024, 100, MAX_CHAIN_PAGES, false, true);
    assert!(breaks >= 9);
    assert_eq!(s.flushes, 2, "the first table's break, then the end: {s:?}");
    // The three, and the two above them that empty with them (the root
    // stays).
    assert_eq!(s.tables_freed, 5);
    // Aligned, the same pages' tables lie inside: one flush.
    let (a, _) = zap_with::<L>(512, 1024, 100, MAX_CHAIN_PAGES, false, true);
    assert_eq!(a.flushes, 1, "{a:?}");
}
