//! Checks every backend must pass, written once (hosted only).
//!
//! Each backend's tests call these with its own types, plus their own literal
//! tests computed by hand from the architecture manual. Every check panics
//! with a message naming what broke.

use crate::{
    Compare, DoubleWord, DwCas, DwCell, EntryKind, MapFlags, PageTableEntry, PageTableLayout,
    PhysAddr, VirtAddr,
};
use std::sync::atomic::Ordering;
use std::thread;

/// Success and failure semantics of both flavours, from one thread.
pub fn dwcas_single_thread<C: DwCas>() {
    type Cas = fn(&DwCell, DoubleWord, DoubleWord) -> Result<DoubleWord, DoubleWord>;
    let flavours: [(&str, Cas); 2] = [
        ("smp", C::compare_exchange),
        ("local", C::compare_exchange_local),
    ];
    for (name, cas) in flavours {
        let cell = DwCell::new(DoubleWord::new(1, 2));
        assert_eq!(
            cas(&cell, DoubleWord::new(1, 2), DoubleWord::new(3, 4)),
            Ok(DoubleWord::new(1, 2)),
            "{name}: matching CAS must succeed and return the old pair"
        );
        assert_eq!(
            cell.load(),
            DoubleWord::new(3, 4),
            "{name}: new pair stored"
        );

        let wrong_hi = cas(&cell, DoubleWord::new(3, 5), DoubleWord::new(9, 9));
        assert_eq!(
            wrong_hi,
            Err(DoubleWord::new(3, 4)),
            "{name}: hi mismatch must fail"
        );
        assert_eq!(
            cell.load(),
            DoubleWord::new(3, 4),
            "{name}: failed CAS stores nothing"
        );

        let wrong_lo = cas(&cell, DoubleWord::new(7, 4), DoubleWord::new(9, 9));
        match C::COMPARE {
            Compare::Both => {
                assert_eq!(
                    wrong_lo,
                    Err(DoubleWord::new(3, 4)),
                    "{name}: lo mismatch must fail"
                );
                assert_eq!(cell.load(), DoubleWord::new(3, 4));
            }
            Compare::HiOnly => {
                assert_eq!(
                    wrong_lo,
                    Ok(DoubleWord::new(3, 4)),
                    "{name}: hi-only ignores lo"
                );
                assert_eq!(cell.load(), DoubleWord::new(9, 9));
            }
        }

        // Full-width values: no truncation or sign games.
        let cell = DwCell::new(DoubleWord::new(u64::MAX, 1 << 63));
        assert!(
            cas(
                &cell,
                DoubleWord::new(u64::MAX, 1 << 63),
                DoubleWord::new(0, u64::MAX)
            )
            .is_ok()
        );
        assert_eq!(cell.load_lo(Ordering::Relaxed), 0);
        assert_eq!(cell.load_hi(Ordering::Relaxed), u64::MAX);
    }
}

/// `threads` threads each add 1 to both halves `iters` times through the SMP
/// flavour; the final pair must be exact (a lost or torn update shows).
pub fn dwcas_stress<C: DwCas>(threads: usize, iters: u64) {
    let cell = DwCell::new(DoubleWord::new(0, 0));
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut cur = cell.load();
                for _ in 0..iters {
                    loop {
                        let new = DoubleWord::new(cur.lo.wrapping_add(1), cur.hi.wrapping_add(1));
                        match C::compare_exchange(&cell, cur, new) {
                            Ok(_) => {
                                cur = new;
                                break;
                            }
                            Err(seen) => cur = seen,
                        }
                    }
                }
            });
        }
    });
    let total = threads as u64 * iters;
    assert_eq!(
        cell.load(),
        DoubleWord::new(total, total),
        "{}: {threads} threads x {iters} increments",
        C::NAME
    );
}

/// Internal consistency of a layout's geometry, and index decomposition of
/// `samples` (canonical addresses): below the root, the indices and the page
/// offset must reassemble the address. Samples must not lie in the topmost
/// level-1 entry of the address space (its `entry_end` is past 2^64).
pub fn layout_geometry<L: PageTableLayout>(samples: &[u64]) {
    let name = L::NAME;
    assert_eq!(
        L::INDEX_BITS.len(),
        L::LEVELS,
        "{name}: one INDEX_BITS entry per level"
    );
    assert_eq!(
        L::level_shift(L::LEVELS - 1),
        L::PAGE_SHIFT,
        "{name}: last level indexes pages"
    );
    assert!(
        L::leaf_allowed(L::LEVELS - 1),
        "{name}: last level holds leaves"
    );
    assert!(
        !L::leaf_allowed(0) || L::LEVELS == 1,
        "{name}: no leaf at the root"
    );
    for l in 0..L::LEVELS {
        assert!(
            L::table_bytes(l) as u64 <= L::PAGE_SIZE,
            "{name}: a level-{l} table must fit in one page"
        );
        if l + 1 < L::LEVELS {
            assert_eq!(
                L::entry_span(l),
                L::entry_span(l + 1) << L::INDEX_BITS[l + 1],
                "{name}: span of level {l} is a full table of level {}",
                l + 1
            );
        }
        assert_eq!(
            L::info().entry_span(l),
            L::entry_span(l),
            "{name}: LayoutInfo agrees"
        );
    }
    for &raw in samples {
        let va = VirtAddr::new(raw);
        assert!(
            L::is_canonical(va),
            "{name}: sample {raw:#x} should be canonical"
        );
        let mut rebuilt = raw & (L::PAGE_SIZE - 1);
        for l in 1..L::LEVELS {
            let i = L::index(va, l);
            assert!(i < L::entries(l), "{name}: index in range");
            rebuilt |= (i as u64) << L::level_shift(l);
        }
        assert_eq!(
            rebuilt,
            raw & (L::entry_span(0) - 1),
            "{name}: indices of {raw:#x} below the root reassemble it"
        );
        assert!(L::index(va, 0) < L::entries(0));
        let end = L::entry_end(va, 1).expect("no overflow below the top");
        assert!(
            end > va && end.is_aligned(L::entry_span(1)),
            "{name}: entry_end"
        );
    }
}

/// Encode / decode round trips of a layout's entries. `supported` is the set
/// of [`MapFlags`] the format can represent exactly; `pa` a frame address the
/// format can hold (aligned as needed per level by this function).
pub fn entry_round_trips<L: PageTableLayout>(supported: MapFlags, pa: u64) {
    let name = L::NAME;
    let last = L::LEVELS - 1;
    let empty = L::Entry::EMPTY;
    assert!(!empty.is_present(), "{name}: EMPTY is not present");
    for l in 0..L::LEVELS {
        assert_eq!(empty.kind(l), EntryKind::None, "{name}: EMPTY at level {l}");
    }
    let page = PhysAddr::new(pa).align_down(L::PAGE_SIZE);
    for l in 0..last {
        let t = L::Entry::new_table(page);
        assert!(t.is_present(), "{name}: table entries are present");
        assert_eq!(t.kind(l), EntryKind::Table, "{name}: table at level {l}");
        assert_eq!(t.addr(), page, "{name}: table address at level {l}");
        assert_eq!(L::Entry::from_raw(t.raw()), t, "{name}: raw round trip");
    }
    let bits: std::vec::Vec<MapFlags> = supported.iter().collect();
    for subset in 0u32..(1 << bits.len()) {
        let flags = bits
            .iter()
            .enumerate()
            .filter(|(i, _)| subset & (1 << i) != 0)
            .fold(MapFlags::empty(), |acc, (_, f)| acc | *f);
        for l in (0..L::LEVELS).filter(|&l| L::leaf_allowed(l)) {
            let frame = PhysAddr::new(pa).align_down(L::entry_span(l));
            let mut e = L::Entry::new_leaf(frame, flags, l);
            assert!(e.is_present(), "{name}: leaf present");
            assert_eq!(
                e.kind(l),
                EntryKind::Leaf,
                "{name}: leaf at level {l} ({flags:?})"
            );
            assert_eq!(e.addr(), frame, "{name}: leaf address at level {l}");
            assert_eq!(
                e.map_flags(),
                flags,
                "{name}: flags round trip at level {l}"
            );
            assert_eq!(L::Entry::from_raw(e.raw()), e, "{name}: raw round trip");
            let other = frame.checked_add(L::entry_span(l)).unwrap();
            e.set_addr(other);
            assert_eq!(e.addr(), other, "{name}: set_addr");
            assert_eq!(e.map_flags(), flags, "{name}: set_addr keeps the flags");
            let arch = e.flags();
            e.set_flags(arch);
            assert_eq!(e.addr(), other, "{name}: set_flags keeps the address");
        }
    }
}
