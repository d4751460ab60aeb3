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
    let ps = L::PAGE_SIZE;
    let t = Tracked::new(ARENA, ps);
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let pages = pages::<L>();
    let start = 0;
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
    let mut breaks = 0u64;
    let mut b = WorkBudget::new(pages * 2 / 5 * ps, 1, ps).with_hook(|_: &BreakInfo| breaks += 1);
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
