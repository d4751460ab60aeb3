//! `LeafPath`: the unlocked map / zap / translate of base pages inside
//! existing last-level tables. It declines (changing nothing) whatever needs
//! the locked walker, keeps the live counts exact, never frees a table, and
//! works beside other CPUs using it and the locked walker on the same
//! last-level table.

#[macro_use]
mod common;

use arch_api::{PageTableLayout, PhysAddr};
use common::{Tiny, Tracked, va};
use std::sync::Mutex;
use zap_walker::{Frames, Gather, MapFlags, Unbounded, Walker};

const ARENA: u64 = if cfg!(miri) { 16 << 20 } else { 1 << 28 };

/// The span of one last-level table.
fn leaf_span<L: PageTableLayout>() -> u64 {
    L::entry_span(L::LEVELS - 2)
}

fn zap_locked<L: PageTableLayout>(w: &mut Walker<'_, L, Tracked>, t: &Tracked, s: u64, e: u64) {
    let mut g: Gather<_, 8> = Gather::new(t.tlb.on(0));
    w.zap_range(va(s), va(e), &mut Unbounded::new(L::PAGE_SIZE), &mut g)
        .unwrap();
}

fn basics<L: PageTableLayout>() {
    let t = Tracked::new(ARENA, L::PAGE_SIZE);
    let mut w = Walker::<L, _>::new(&t).unwrap();
    // SAFETY: `lp` is not used after `w` is dropped (end of this function).
    let lp = unsafe { w.leaf_path() }.unwrap();
    w.set_free_empty_tables(true);
    let ps = L::PAGE_SIZE;
    let base = 3 * leaf_span::<L>();
    let f: Vec<PhysAddr> = (0..3).map(|k| t.frame(base + k * ps)).collect();
    // No table yet: declined, nothing written.
    assert_eq!(lp.map(va(base), &f, MapFlags::WRITE), Ok(false));
    assert_eq!(lp.translate(va(base)), None);
    assert_eq!(
        lp.zap(va(base), va(base + 3 * ps), &mut [PhysAddr::new(0); 3]),
        None
    );
    // The locked walk populates the table (one page at the end of it).
    let tail = base + leaf_span::<L>() - ps;
    let g = t.frame(tail);
    w.map_range(va(tail), Frames::List(&[g]), MapFlags::WRITE)
        .unwrap();
    let tables = w.tables_in_use();
    let odd = PhysAddr::new(f[0].as_u64() + 8);
    assert_eq!(
        lp.map(va(base), &[odd], MapFlags::WRITE),
        Err(zap_walker::WalkError::UnalignedFrame { frame: odd })
    );
    // Now the unlocked path maps, translates and zaps.
    assert_eq!(lp.map(va(base), &f, MapFlags::WRITE), Ok(true));
    w.check_consistency().unwrap();
    for (k, f) in f.iter().enumerate() {
        let tr = lp.translate(va(base + k as u64 * ps)).unwrap();
        assert_eq!(tr.frame, *f);
        assert_eq!(Some(tr), w.translate(va(base + k as u64 * ps)));
    }
    // Across the table's end, or onto a mapped page: declined, unchanged.
    let g2 = t.frame(tail - ps);
    assert_eq!(lp.map(va(tail - ps), &[g2, g2], MapFlags::WRITE), Ok(false));
    assert_eq!(lp.translate(va(tail - ps)), None, "rolled back");
    assert_eq!(lp.map(va(base + 2 * ps), &[g2], MapFlags::WRITE), Ok(false));
    assert_eq!(lp.translate(va(base + 2 * ps)).unwrap().frame, f[2]);
    let mut out = [PhysAddr::new(0); 4];
    assert_eq!(
        lp.zap(va(tail - ps), va(tail + ps), &mut out[..1]),
        None,
        "out too short"
    );
    // Zap: the frames come back to the caller with the flush they are
    // owed; the counts stay exact.
    t.tlb.touch_range(1, va(base), va(base + 3 * ps));
    let cleared = lp.zap(va(base), va(base + 3 * ps), &mut out).unwrap();
    assert_eq!(cleared.frames(), 3);
    assert_eq!(cleared.range(), (va(base), va(base + 3 * ps)));
    assert_eq!(&out[..3], &f[..]);
    assert_eq!(lp.translate(va(base)), None);
    assert!(
        t.tlb.may_hold(va(base), va(base + 3 * ps)),
        "not flushed yet"
    );
    cleared.flush(&t.tlb.on(0), ps);
    assert!(!t.tlb.may_hold(va(base), va(base + 3 * ps)), "flushed");
    w.check_consistency().unwrap();
    // The locked zap of the last page leaves the table: pinned.
    zap_locked(&mut w, &t, tail, tail + ps);
    assert_eq!(w.tables_in_use(), tables, "no table freed once pinned");
    w.check_consistency().unwrap();
    for f in f.into_iter().chain([g2]) {
        t.give_back(f);
    }
    drop(w);
    assert_eq!(t.arena.frames_in_use(), 0);
}
on_every_layout!(basics_on, basics);

/// Two CPUs map and zap their own pages of one last-level table through the
/// path while a third maps and zaps other pages of it (and of a table it
/// populates) through the locked walker: every count stays exact.
fn concurrent<L: PageTableLayout>() {
    let t = Tracked::new(ARENA, L::PAGE_SIZE);
    let mut w = Walker::<L, _>::new(&t).unwrap();
    // SAFETY: `lp` is not used after `w` is dropped (end of this function).
    let lp = unsafe { w.leaf_path() }.unwrap();
    let ps = L::PAGE_SIZE;
    let base = 5 * leaf_span::<L>();
    let entries = leaf_span::<L>() / ps;
    assert!(entries >= 8);
    // Populate the table with the locked walker's page at slot 7.
    let keep = t.frame(base + 7 * ps);
    w.map_range(va(base + 7 * ps), Frames::List(&[keep]), MapFlags::WRITE)
        .unwrap();
    let w = Mutex::new(w);
    let rounds = if cfg!(miri) { 20 } else { 2000 };
    std::thread::scope(|s| {
        for cpu in 0..2u64 {
            let (t, lp) = (&t, &lp);
            s.spawn(move || {
                // Slots 2*cpu and 2*cpu + 1: two pages of this CPU's own.
                let a = base + 2 * cpu * ps;
                let f = [t.frame(a), t.frame(a + ps)];
                let mut out = [PhysAddr::new(0); 2];
                for _ in 0..rounds {
                    assert_eq!(lp.map(va(a), &f, MapFlags::WRITE), Ok(true));
                    assert_eq!(lp.translate(va(a + ps)).unwrap().frame, f[1]);
                    assert_eq!(
                        lp.zap(va(a), va(a + 2 * ps), &mut out).map(|u| u.frames()),
                        Some(2)
                    );
                    assert_eq!(out, f);
                }
                f.into_iter().for_each(|f| t.give_back(f));
            });
        }
        let (t, w) = (&t, &w);
        s.spawn(move || {
            // Slot 5 here, and a page in a table of its own further on.
            let far = base + 3 * leaf_span::<L>();
            for _ in 0..rounds {
                for x in [base + 5 * ps, far] {
                    let f = t.frame(x);
                    let mut w = w.lock().unwrap();
                    w.map_range(va(x), Frames::List(&[f]), MapFlags::WRITE)
                        .unwrap();
                }
                for x in [base + 5 * ps, far] {
                    zap_locked(&mut w.lock().unwrap(), t, x, x + ps);
                }
            }
        });
    });
    let mut w = w.into_inner().unwrap();
    w.check_consistency().unwrap();
    assert_eq!(w.translate(va(base + 7 * ps)).unwrap().frame, keep);
    zap_locked(&mut w, &t, base + 7 * ps, base + 8 * ps);
    w.check_consistency().unwrap();
    drop(w);
    assert_eq!(t.arena.frames_in_use(), 0, "every frame and table back");
    assert_eq!(t.violations.load(std::sync::atomic::Ordering::Relaxed), 0);
}
on_every_layout!(concurrent_on, concurrent);
