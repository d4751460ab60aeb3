//! `cargo +nightly fuzz run walk` (from zap-walker/): map / zap / translate
//! sequences chosen by the fuzzer on every layout (the first byte picks it),
//! against a model (page va -> frame, flags). The same checks as
//! `tests/prop.rs`, with the fuzzer choosing the windows, lengths, large
//! leaves (`MapHint::LargeLeaves`), budgets (work and address budgets of any
//! size, so lock breaks land anywhere) and the table stock:
//! * a map over a mapped page fails with `AlreadyMapped` and changes nothing;
//! * after a zap every page of the range translates to nothing, its frame
//!   came back exactly once (through the gather, after the TLB flush), and the
//!   neighbours are untouched;
//! * translations agree with the model (frame, offset, flags);
//! * `check_consistency` (live counts, the `debug` zero checks) after each op;
//! * at the end no table page is left below the root and every frame is back.
#![no_main]

#[allow(dead_code, unused_macros)]
#[path = "../../tests/common/mod.rs"]
mod common;

use arch_api::{FrameSource, PageTableLayout, PhysAddr, VirtAddr};
use common::{Tiny, Tracked, windows};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use zap_walker::{
    AddressBudget, Frames, Gather, MapFlags, MapHint, Unbounded, WalkError, Walker, WorkBudget,
};

/// The fuzzer's bytes as a stream of numbers (zeros once exhausted).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u64 {
        u64::from(self.u8()) | u64::from(self.u8()) << 8
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.u16() % n }
    }
}

/// Physical memory per run for pages of `ps` bytes: small, because the
/// arena is zeroed (every page touched) at each run's start; maps that would
/// not fit (with room for their tables) are skipped.
fn arena_bytes(ps: u64) -> u64 {
    (ps * 256).max(8 << 20)
}

/// Whether `bytes` more (and tables for them) fit the arena.
fn fits(t: &Tracked, ps: u64, bytes: u64) -> bool {
    t.arena.bytes_in_use() + bytes + 16 * ps <= arena_bytes(ps)
}

/// `pages` contiguous pages of `ps` bytes aligned to `align`, armed for
/// `va..`, or `None` when the arena has no such block (fragmented): the op is
/// skipped.
fn block(t: &Tracked, ps: u64, pages: u64, align: u64, va: u64) -> Option<PhysAddr> {
    let f = t.arena.alloc(pages * ps, align).ok()?;
    for i in 0..pages {
        t.arm(PhysAddr::new(f.as_u64() + i * ps), Some(va + i * ps));
    }
    Some(f)
}

fn trace() -> bool {
    std::env::var_os("ZAP_TRACE").is_some()
}

fn flags_for(b: u8) -> MapFlags {
    let mut f = MapFlags::empty();
    if b & 1 != 0 {
        f |= MapFlags::WRITE;
    }
    if b & 2 != 0 {
        f |= MapFlags::EXEC;
    }
    f
}

/// Zaps `start..end` with the budget `which` chose, checks the result against
/// the model and updates it.
fn zap<L: PageTableLayout>(
    w: &mut Walker<'_, L, Tracked>,
    t: &Tracked,
    g: &mut Gather<arch_api::SoftTlbCpu<'_>, 32>,
    m: &mut BTreeMap<u64, (u64, MapFlags)>,
    (start, end): (u64, u64),
    which: u8,
    size: u64,
) {
    let ps = L::PAGE_SIZE;
    let gone: Vec<(u64, u64)> = m.range(start..end).map(|(&v, &(f, _))| (v, f)).collect();
    for &(v, _) in &gone {
        t.tlb.touch(1, VirtAddr::new(v));
    }
    let before = g.stats().frame_bytes_freed;
    let (s, e) = (VirtAddr::new(start), VirtAddr::new(end));
    let r = match which % 6 {
        0 => w.zap_range(s, e, &mut WorkBudget::for_page_size(ps, true), g),
        1 => w.zap_range(s, e, &mut WorkBudget::for_page_size(ps, false), g),
        // Any budget, any costs: breaks after every few entries.
        2 => w.zap_range(
            s,
            e,
            &mut WorkBudget::new(1 + size % 64, 1 + size % 3, 1 + (size >> 8) % 9),
            g,
        ),
        3 => w.zap_range(s, e, &mut AddressBudget::for_page_size(ps, true), g),
        4 => w.zap_range(s, e, &mut AddressBudget::new((size % 64) * ps, ps), g),
        _ => w.zap_range(s, e, &mut Unbounded::new(ps), g),
    };
    r.unwrap_or_else(|e| panic!("zap {start:#x}..{end:#x}: {e}"));
    assert!(g.is_empty(), "gather finished");
    assert!(!t.tlb.may_hold(s, e), "range flushed");
    for &(v, f) in &gone {
        assert_eq!(w.translate(VirtAddr::new(v)), None, "{v:#x} unmapped");
        assert_eq!(
            t.freed(PhysAddr::new(f)),
            1,
            "frame of {v:#x} came back exactly once"
        );
        m.remove(&v);
    }
    assert_eq!(
        g.stats().frame_bytes_freed - before,
        gone.len() as u64 * ps,
        "the gather freed exactly the unmapped frames"
    );
    for v in [start.wrapping_sub(ps), end] {
        let want = m.get(&v).map(|&(f, _)| f);
        let got = w.translate(VirtAddr::new(v)).map(|t| t.phys.as_u64());
        assert_eq!(got, want, "neighbour {v:#x} untouched");
    }
}

fn run<L: PageTableLayout>(b: &mut Bytes<'_>) {
    let ps = L::PAGE_SIZE;
    let last_entries = L::entries(L::LEVELS - 1) as u64;
    let wins = windows::<L>(4 * last_entries.min(256));
    let t = Tracked::new(arena_bytes(ps), ps);
    let mut g: Gather<_, 32> = Gather::new(t.tlb.on(0));
    let mut w = Walker::<L, _>::new(&t).unwrap();
    let stock = u64::from(b.u8() % 4);
    w.set_table_stock(stock).unwrap();
    let roots_frames = t.arena.frames_in_use();
    let mut m: BTreeMap<u64, (u64, MapFlags)> = BTreeMap::new();
    // Large leaves where a block is small enough to model page by page.
    let large_level = (1..L::LEVELS - 1)
        .rev()
        .find(|&l| L::leaf_allowed(l) && L::entry_span(l) / ps <= 2048);

    for op in 0.. {
        if b.0.is_empty() || op > 400 {
            break;
        }
        w.check_consistency()
            .unwrap_or_else(|e| panic!("before op {op}: {e}"));
        let kind = b.u8();
        let (ws, we) = wins[usize::from(kind >> 4) % wins.len()];
        let wpages = (we - ws) / ps;
        match kind % 8 {
            // Base pages from a list of frames, or a contiguous run (with
            // the large-leaf hint: leaves wherever it is aligned).
            0..=2 => {
                let sp = b.below(wpages);
                let long = b.u8();
                let maxlen = if long & 7 == 0 { wpages } else { 40 };
                let n = (1 + b.below(maxlen)).min(wpages - sp);
                let start = ws + sp * ps;
                let end = start + n * ps;
                // With an alignment's worth: a contiguous run starts inside
                // an aligned block.
                let align = large_level.map_or(ps, L::entry_span);
                if !fits(&t, ps, n * ps + align) {
                    continue;
                }
                let overlap = m.range(start..end).next().is_some();
                let fl = flags_for(long >> 3);
                let contiguous = kind % 8 == 2;
                let frames: Vec<PhysAddr> = if contiguous {
                    // Aligned like the virtual address to a large leaf, so
                    // the hint can use one where the range covers an entry.
                    // The block starts `skew` pages before the run, so that
                    // frame i sits at the same offset within a block as page i.
                    let skew = (start % align) / ps;
                    let Some(f) = block(&t, ps, skew + n, align, start - skew * ps) else {
                        continue;
                    };
                    for i in 0..skew {
                        t.give_back(PhysAddr::new(f.as_u64() + i * ps));
                    }
                    (skew..skew + n)
                        .map(|i| PhysAddr::new(f.as_u64() + i * ps))
                        .collect()
                } else {
                    (0..n).map(|i| t.frame(start + i * ps)).collect()
                };
                let before = (w.tables_in_use(), t.arena.frames_in_use());
                if trace() {
                    eprintln!("op {op} map {start:#x}+{n} contiguous {contiguous}");
                }
                let r = if contiguous {
                    w.map_range_with(
                        VirtAddr::new(start),
                        Frames::Contiguous {
                            start: frames[0],
                            pages: n,
                        },
                        fl,
                        MapHint::LargeLeaves,
                    )
                } else {
                    w.map_range(VirtAddr::new(start), Frames::List(&frames), fl)
                };
                if overlap {
                    assert!(
                        matches!(r, Err(WalkError::AlreadyMapped { .. })),
                        "op {op}: {r:?}"
                    );
                    assert_eq!(
                        before,
                        (w.tables_in_use(), t.arena.frames_in_use()),
                        "a failed map changed nothing"
                    );
                    for f in frames {
                        t.give_back(f);
                    }
                } else {
                    r.unwrap_or_else(|e| panic!("op {op}: map {start:#x}+{n}: {e}"));
                    for (i, f) in frames.iter().enumerate() {
                        m.insert(start + i as u64 * ps, (f.as_u64(), fl));
                    }
                }
            }
            // One aligned large leaf (whole entry), if one fits the window.
            3 => {
                let Some(l) = large_level else { continue };
                let span = L::entry_span(l);
                let first = ws.div_ceil(span) * span;
                if first + span > we {
                    continue;
                }
                let start = first + b.below((we - first) / span) * span;
                if m.range(start..start + span).next().is_some() || !fits(&t, ps, span) {
                    continue;
                }
                if trace() {
                    eprintln!("op {op} large {start:#x} span {span:#x}");
                }
                let pages = span / ps;
                let Some(f) = block(&t, ps, pages, span, start) else {
                    continue;
                };
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
                    m.insert(start + i * ps, (f.as_u64() + i * ps, MapFlags::WRITE));
                }
            }
            4..=5 => {
                let a = b.below(wpages);
                let maxlen = if b.u8() & 3 == 0 { wpages } else { 64 };
                let e = (a + 1 + b.below(maxlen)).min(wpages);
                let which = b.u8();
                let size = b.u16();
                if trace() {
                    eprintln!(
                        "op {op} zap {:#x}..{:#x} budget {which} {size}",
                        ws + a * ps,
                        ws + e * ps
                    );
                }
                zap(
                    &mut w,
                    &t,
                    &mut g,
                    &mut m,
                    (ws + a * ps, ws + e * ps),
                    which,
                    size,
                );
            }
            _ => {
                for _ in 0..4 {
                    let v = ws + b.below(wpages) * ps;
                    let off = (b.u16() % ps) & !7;
                    let got = w.translate(VirtAddr::new(v + off));
                    match m.get(&v) {
                        None => assert_eq!(got, None, "op {op}: {v:#x} is unmapped"),
                        Some(&(f, fl)) => {
                            let tr =
                                got.unwrap_or_else(|| panic!("op {op}: {v:#x} should be mapped"));
                            assert_eq!(tr.phys.as_u64(), f + off, "op {op}: {v:#x}");
                            assert_eq!(tr.flags, fl, "op {op}: {v:#x}");
                        }
                    }
                }
            }
        }
    }
    // Tear everything down: nothing may be left but the roots.
    for &win in &wins {
        zap(&mut w, &t, &mut g, &mut m, win, 5, 0);
    }
    assert!(m.is_empty(), "every mapped page was in a window");
    assert_eq!(
        w.tables_below_root(),
        0,
        "{}: no table page leaked",
        L::NAME
    );
    assert_eq!(
        t.arena.bytes_in_use(),
        w.pagetable_bytes(),
        "{}: the arena holds the page tables and the stock, exactly",
        L::NAME
    );
    w.drain_table_stock().unwrap();
    assert_eq!(t.arena.frames_in_use(), roots_frames, "every frame is back");
    assert_eq!(
        t.violations.load(Ordering::Relaxed),
        0,
        "nothing freed before its flush"
    );
    drop(w);
    assert_eq!(t.arena.frames_in_use(), 0);
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    match b.u8() % 7 {
        0 => run::<Tiny>(&mut b),
        1 => run::<arch_x86_64::X86_64Pml4>(&mut b),
        2 => run::<arch_x86_64::X86_64La57>(&mut b),
        3 => run::<arch_aarch64::Aarch64Granule4K>(&mut b),
        4 => run::<arch_aarch64::Aarch64Granule16K>(&mut b),
        5 => run::<arch_aarch64::Aarch64Granule64K>(&mut b),
        _ => run::<arch_ia64_sim::Ia64Sim>(&mut b),
    }
});
