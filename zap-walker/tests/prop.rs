//! Property tests on every layout: random map / unmap / translate sequences
//! against a reference model (page -> frame). After every unmap the unmapped
//! pages translate to nothing, each of their frames came back exactly once
//! (through the gather, after the TLB flush), and pages outside the range
//! are untouched. At the end, with freeing of empty tables on, no table page
//! is left below the root(s) and every frame is back in the arena.

mod common;

use arch_api::{PageTableLayout, PhysAddr, VirtAddr};
use common::{Rng, Tiny, Tracked, windows};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use zap_walker::{
    AddressBudget, Frames, Gather, MapFlags, MapHint, Unbounded, WalkError, Walker, WorkBudget,
};

/// Operations per run: fewer in unoptimised builds (the debug-feature and
/// qemu rows), whose every op walks every table; the release row runs them
/// all.
fn ops() -> usize {
    if cfg!(miri) {
        40
    } else if cfg!(debug_assertions) {
        300
    } else {
        800
    }
}

fn flags_for(r: u64) -> MapFlags {
    let mut f = MapFlags::empty();
    if r & 1 != 0 {
        f |= MapFlags::WRITE;
    }
    f
}

struct Model {
    /// page va -> (frame, flags)
    pages: BTreeMap<u64, (u64, MapFlags)>,
}

fn run<L: PageTableLayout>(seed: u64) {
    let ps = L::PAGE_SIZE;
    let last_entries = L::entries(L::LEVELS - 1) as u64;
    // Windows of up to 1024 pages around each boundary: wide enough to hold
    // two aligned 2 MiB blocks on 4 KiB layouts, small enough for 64 KiB pages.
    let win_pages = if cfg!(miri) {
        last_entries.min(16) * 4
    } else {
        4 * last_entries.min(256)
    };
    let wins = windows::<L>(win_pages);
    let arena = if cfg!(miri) { 32 << 20 } else { 1 << 30 };
    let t = Tracked::new(arena, ps);
    let mut g: Gather<_, 32> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    // The zeroed-table stock is off for a quarter of the seeds, else bounded
    // at 1 to 3 pages per level: freed tables are reused by later maps.
    let stock = (seed + 1) % 4;
    w.set_table_stock(stock).unwrap();
    let roots_frames = t.arena.frames_in_use();
    let mut m = Model {
        pages: BTreeMap::new(),
    };
    let mut rng = Rng(seed | 1);
    // Large leaves only where a block is small enough to model page by page.
    let large_level = (1..L::LEVELS - 1)
        .rev()
        .find(|&l| L::leaf_allowed(l) && L::entry_span(l) / ps <= 2048 && !cfg!(miri));

    for op in 0..ops() {
        // Every op natively; every 10th under miri (it walks every table).
        if !cfg!(miri) || op % 10 == 0 {
            w.check_consistency()
                .unwrap_or_else(|e| panic!("before op {op}: {e}"));
        }
        let (ws, we) = wins[rng.below(wins.len() as u64) as usize];
        let wpages = (we - ws) / ps;
        match rng.below(10) {
            0..=3 => {
                if std::env::var("ZAP_TRACE").is_ok() {
                    eprintln!("op {op} map");
                }
                let sp = rng.below(wpages);
                let maxlen = if rng.below(8) == 0 { wpages } else { 40 };
                let n = (1 + rng.below(maxlen)).min(wpages - sp);
                let start = ws + sp * ps;
                let end = start + n * ps;
                let overlap = m.pages.range(start..end).next().is_some();
                let fl = flags_for(rng.next());
                let frames: Vec<PhysAddr> = (0..n).map(|i| t.frame(start + i * ps)).collect();
                let before = (w.tables_in_use(), t.arena.frames_in_use());
                let r = w.map_range(VirtAddr::new(start), Frames::List(&frames), fl);
                if overlap {
                    assert!(
                        matches!(r, Err(WalkError::AlreadyMapped { .. })),
                        "op {op}: {r:?}"
                    );
                    assert_eq!(
                        before,
                        (w.tables_in_use(), t.arena.frames_in_use()),
                        "failed map changed nothing"
                    );
                    for f in frames {
                        t.give_back(f);
                    }
                } else {
                    r.unwrap_or_else(|e| panic!("op {op}: map {start:#x}+{n}: {e}"));
                    for (i, f) in frames.iter().enumerate() {
                        m.pages.insert(start + i as u64 * ps, (f.as_u64(), fl));
                    }
                }
            }
            4 if large_level.is_some() => {
                let l = large_level.unwrap();
                let span = L::entry_span(l);
                // An aligned block inside the window, if one fits.
                let first = ws.div_ceil(span) * span;
                if first + span > we {
                    continue;
                }
                let k = rng.below((we - first) / span);
                let start = first + k * span;
                let overlap = m.pages.range(start..start + span).next().is_some();
                if overlap {
                    continue;
                }
                if std::env::var("ZAP_TRACE").is_ok() {
                    eprintln!("op {op} large {start:#x} span {span:#x}");
                }
                let pages = span / ps;
                let f = t.block(pages, span, start);
                w.map_range_with(
                    VirtAddr::new(start),
                    Frames::Contiguous { start: f, pages },
                    MapFlags::WRITE,
                    MapHint::LargeLeaves,
                )
                .unwrap();
                let tr = w.translate(VirtAddr::new(start + ps)).unwrap();
                assert_eq!(tr.level, l, "a large leaf was used");
                for i in 0..pages {
                    m.pages
                        .insert(start + i * ps, (f.as_u64() + i * ps, MapFlags::WRITE));
                }
            }
            4..=6 => {
                let a = rng.below(wpages);
                let maxlen = if rng.below(4) == 0 { wpages } else { 64 };
                let b = (a + 1 + rng.below(maxlen)).min(wpages);
                let (start, end) = (ws + a * ps, ws + b * ps);
                if std::env::var("ZAP_TRACE").is_ok() {
                    eprintln!("op {op} zap {start:#x}..{end:#x}");
                }
                let gone: Vec<(u64, u64)> = m
                    .pages
                    .range(start..end)
                    .map(|(&v, &(f, _))| (v, f))
                    .collect();
                for &(v, _) in &gone {
                    t.tlb.touch(1, VirtAddr::new(v));
                }
                let gs = g.stats();
                let r = match rng.below(4) {
                    0 => w.zap_range(
                        VirtAddr::new(start),
                        VirtAddr::new(end),
                        &mut WorkBudget::for_page_size(ps, true),
                        &mut g,
                    ),
                    1 => w.zap_range(
                        VirtAddr::new(start),
                        VirtAddr::new(end),
                        &mut WorkBudget::for_page_size(ps, false),
                        &mut g,
                    ),
                    2 => w.zap_range(
                        VirtAddr::new(start),
                        VirtAddr::new(end),
                        &mut AddressBudget::for_page_size(ps, true),
                        &mut g,
                    ),
                    _ => w.zap_range(
                        VirtAddr::new(start),
                        VirtAddr::new(end),
                        &mut Unbounded::new(ps),
                        &mut g,
                    ),
                };
                r.unwrap_or_else(|e| panic!("op {op}: zap {start:#x}..{end:#x}: {e}"));
                assert!(g.is_empty(), "gather finished");
                assert!(
                    !t.tlb.may_hold(VirtAddr::new(start), VirtAddr::new(end)),
                    "op {op}: range flushed"
                );
                for &(v, f) in &gone {
                    assert_eq!(
                        w.translate(VirtAddr::new(v)),
                        None,
                        "op {op}: {v:#x} unmapped"
                    );
                    assert_eq!(
                        t.freed(PhysAddr::new(f)),
                        1,
                        "op {op}: frame of {v:#x} came back exactly once"
                    );
                    m.pages.remove(&v);
                }
                let gd = g.stats().frame_bytes_freed - gs.frame_bytes_freed;
                assert_eq!(
                    gd,
                    gone.len() as u64 * ps,
                    "op {op}: the gather freed exactly the unmapped frames"
                );
                for v in [start.wrapping_sub(ps), end] {
                    let want = m.pages.get(&v).map(|&(f, _)| f);
                    let got = w.translate(VirtAddr::new(v)).map(|t| t.phys.as_u64());
                    assert_eq!(got, want, "op {op}: neighbour {v:#x} untouched");
                }
            }
            _ => {
                for _ in 0..8 {
                    let v = ws + rng.below(wpages) * ps;
                    let off = rng.below(ps) & !7;
                    let got = w.translate(VirtAddr::new(v + off));
                    match m.pages.get(&v) {
                        None => assert_eq!(got, None, "op {op}: {v:#x} is unmapped"),
                        Some(&(f, fl)) => {
                            let tr =
                                got.unwrap_or_else(|| panic!("op {op}: {v:#x} should be mapped"));
                            assert_eq!(tr.phys.as_u64(), f + off, "op {op}: {v:#x}");
                            assert_eq!(tr.flags, fl);
                        }
                    }
                }
            }
        }
    }
    // Tear everything down: nothing may be left but the roots.
    for &(ws, we) in &wins {
        w.zap_range(
            VirtAddr::new(ws),
            VirtAddr::new(we),
            &mut WorkBudget::for_page_size(ps, true),
            &mut g,
        )
        .unwrap();
    }
    assert_eq!(
        w.tables_below_root(),
        0,
        "{}: no table page leaked",
        L::NAME
    );
    assert!(w.stocked_tables() <= stock * (L::LEVELS as u64 - 1));
    assert_eq!(
        t.arena.bytes_in_use(),
        w.pagetable_bytes(),
        "{}: the arena holds the page tables and the stock, exactly",
        L::NAME
    );
    w.drain_table_stock().unwrap();
    assert_eq!(
        t.arena.frames_in_use(),
        roots_frames,
        "{}: every frame is back",
        L::NAME
    );
    assert_eq!(
        t.violations.load(Ordering::Relaxed),
        0,
        "{}: nothing freed before its flush",
        L::NAME
    );
    drop(w);
    assert_eq!(t.arena.frames_in_use(), 0);
}

#[test]
fn tiny() {
    for seed in 1..=if cfg!(miri) { 2 } else { 20 } {
        run::<Tiny>(seed * 0x9e37_79b9);
    }
}

#[test]
fn x86_64_pml4() {
    run::<arch_x86_64::X86_64Pml4>(11);
}

#[test]
fn x86_64_la57() {
    run::<arch_x86_64::X86_64La57>(12);
}

#[test]
fn aarch64_4k() {
    run::<arch_aarch64::Aarch64Granule4K>(13);
}

#[test]
#[cfg_attr(miri, ignore = "16 KiB tables: too slow under miri; covered natively")]
fn aarch64_16k() {
    run::<arch_aarch64::Aarch64Granule16K>(14);
}

#[test]
#[cfg_attr(miri, ignore = "64 KiB tables: too slow under miri; covered natively")]
fn aarch64_64k() {
    run::<arch_aarch64::Aarch64Granule64K>(15);
}

#[test]
#[cfg_attr(miri, ignore = "16 KiB tables: too slow under miri; covered natively")]
fn ia64_sim() {
    run::<arch_ia64_sim::Ia64Sim>(16);
}
