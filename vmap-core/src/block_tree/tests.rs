//! `BlockTree`'s own checks: its invariants after every kind of change,
//! and its placement against a sorted list searched gap by gap.

use super::*;
use crate::VmapError;
use crate::request::Fit;
use std::vec::Vec;

const PAGE: u64 = 4096;

impl BlockTree {
    /// Every invariant (`check.rs`), and the areas as `areas` lists them.
    fn check(&self) {
        assert_eq!(self.check_tree(), Ok(self.areas));
        assert_eq!(self.areas().len(), self.areas);
    }
}

/// The same space as a sorted list, searched one gap at a time.
struct Model {
    start: u64,
    end: u64,
    areas: Vec<(u64, u64)>,
}

impl Model {
    fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        let mut prev = self.start;
        for i in 0..=self.areas.len() {
            let next = self.areas.get(i).map_or(self.end, |a| a.0);
            let a = prev.next_multiple_of(align);
            if a + size <= next {
                self.areas.insert(i, (a, a + size));
                return Some(a);
            }
            prev = self.areas.get(i).map_or(prev, |a| a.1);
        }
        None
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
#[cfg_attr(miri, ignore = "no unsafe code to check, and minutes under miri")]
fn matches_a_sorted_list_through_splits_and_unlinks() {
    // Enough live areas for two levels of inner nodes natively.
    let (ops, check_every, most) = (20_000, 211, 1500usize);
    for seed in 1..=3u64 {
        let (start, end) = (16 * PAGE, 16 * PAGE + 12 * most as u64 * PAGE);
        let mut t = BlockTree::new(start, end, PAGE).unwrap();
        let mut m = Model {
            start,
            end,
            areas: Vec::new(),
        };
        let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut live = Vec::new();
        for op in 0..ops {
            // Grow to `most` areas, then hold there, as the aged workload.
            let grow = live.len() < most / 3 || (live.len() < most && r.next() % 3 != 0);
            if grow || r.next() % 2 == 0 {
                let size = (r.next() % 16 + 1) * PAGE;
                let align = PAGE << (r.next() % 8).saturating_sub(4);
                let got = t.alloc(size, align).ok();
                assert_eq!(
                    got,
                    m.alloc(size, align),
                    "op {op}: alloc {size:#x} align {align:#x}"
                );
                if let Some(a) = got {
                    live.push((a, size));
                }
            } else if !live.is_empty() {
                let (a, size) = live.swap_remove((r.next() % live.len() as u64) as usize);
                assert_eq!(t.free(a), Ok(size));
                let k = m.areas.iter().position(|x| x.0 == a).unwrap();
                m.areas.remove(k);
            }
            if op % check_every == 0 {
                t.check();
                assert_eq!(t.areas(), m.areas);
            }
        }
        t.check();
        while let Some((a, size)) = live.pop() {
            assert_eq!(t.free(a), Ok(size));
        }
        t.check();
        assert!(t.is_empty());
        assert_eq!(t.height, 0, "every split is undone once the space empties");
    }
}

/// Growth splits only the rightmost nodes; here every leaf in turn
/// takes one more record than it had, so leaves and inner nodes split
/// in the middle of the tree, at every position.
#[test]
#[cfg_attr(miri, ignore = "no unsafe code to check, and minutes under miri")]
fn splits_in_the_middle_keep_separators_and_gaps() {
    let n = 1000;
    let mut t = BlockTree::new(0, 1 << 40, PAGE).unwrap();
    let mut m = Model {
        start: 0,
        end: 1 << 40,
        areas: Vec::new(),
    };
    let mut starts: Vec<u64> = (0..n)
        .map(|_| {
            let a = t.alloc(4 * PAGE, PAGE).unwrap();
            assert_eq!(m.alloc(4 * PAGE, PAGE), Some(a));
            a
        })
        .collect();
    // Each pass halves every area (one record becomes two), so every
    // node doubles and splits wherever it sits.
    for (k, size) in [2 * PAGE, PAGE].into_iter().enumerate() {
        let mut halves = Vec::new();
        for &a in &starts {
            assert_eq!(t.free(a), Ok(2 * size));
            m.areas.retain(|x| x.0 != a);
            for _ in 0..2 {
                let got = t.alloc(size, PAGE).unwrap();
                assert_eq!(Some(got), m.alloc(size, PAGE));
                halves.push(got);
            }
            if halves.len() % 194 == 0 {
                t.check();
            }
        }
        t.check();
        assert_eq!(t.areas(), m.areas, "pass {k}");
        starts = halves;
    }
    assert!(t.height >= 2, "inner nodes split too");
}

/// A full inner node whose middle child splits: the new child ends the
/// left half (the right half's separator is already in the parent).
#[test]
fn a_split_at_the_middle_of_a_full_inner_node() {
    let mut t = BlockTree::new(0, 1 << 40, PAGE).unwrap();
    while !(t.height == 1 && t.inners[t.root as usize].n == B) {
        t.alloc(4 * PAGE, PAGE).unwrap();
    }
    let middle = t.inners[t.root as usize].child[B / 2 - 1];
    // Halve the middle leaf's records until it splits.
    while t.height == 1 {
        let l = &t.leaves[middle as usize];
        let i = (0..l.n)
            .find(|&i| l.rec[i].end - l.rec[i].start > PAGE)
            .unwrap();
        let size = t.free(l.rec[i].start).unwrap();
        t.alloc(size / 2, PAGE).unwrap();
        t.alloc(size / 2, PAGE).unwrap();
        t.check();
    }
    let root = &t.inners[t.root as usize];
    assert_eq!(
        t.inners[root.child[0] as usize].n,
        B / 2 + 1,
        "the new leaf ends the left half"
    );
    let want: Vec<u64> = t.areas().iter().map(|a| a.0).collect();
    for a in want {
        assert_eq!(t.find_area(a).map(|x| x.0), Some(a));
    }
}

#[test]
fn finds_the_area_around_an_address_and_refuses_bad_frees() {
    let mut t = BlockTree::new(0, 1 << 40, PAGE).unwrap();
    let mut starts = Vec::new();
    for k in 0..200u64 {
        let a = t.alloc((k % 5 + 1) * PAGE, PAGE).unwrap();
        starts.push(a);
    }
    // Free every other one: holes, and leaves that lose their first record.
    for &a in starts.iter().step_by(2) {
        t.free(a).unwrap();
    }
    t.check();
    for (k, &a) in starts.iter().enumerate() {
        let size = (k as u64 % 5 + 1) * PAGE;
        let want = (k % 2 == 1).then_some((a, a + size));
        assert_eq!(t.find_area(a), want);
        assert_eq!(t.find_area(a + size - 1), want);
    }
    let gone = |addr| Err(VmapError::NotFound { addr });
    assert_eq!(t.free(starts[0]), gone(starts[0]));
    assert_eq!(t.free(starts[1] + PAGE), gone(starts[1] + PAGE));
    assert_eq!(t.free(1 << 40), gone(1 << 40));
    // The request errors are VmapSpace's.
    assert_eq!(t.alloc(0, PAGE), Err(VmapError::ZeroSize));
    assert_eq!(
        t.alloc(PAGE, 3 * PAGE),
        Err(VmapError::AlignNotPowerOfTwo { align: 3 * PAGE })
    );
    assert!(matches!(
        t.alloc(1 << 41, PAGE),
        Err(VmapError::NoSpace { .. })
    ));
    assert!(matches!(
        t.alloc(u64::MAX - PAGE + 1, 1 << 63),
        Err(VmapError::NoSpace { .. })
    ));
    assert_eq!(
        BlockTree::new(PAGE, PAGE, PAGE).err(),
        Some(VmapError::EmptyRange {
            vstart: PAGE,
            vend: PAGE
        })
    );
    assert!(BlockTree::new(0, PAGE, 3).is_err());
    t.check();
}

/// A search's way down serves the change that follows it, never one after
/// the tree changed in between (`index.rs`'s hints).
#[test]
fn kept_ways_down_do_not_outlive_a_change() {
    let (start, end) = (16 * PAGE, 1024 * PAGE);
    let mut t = BlockTree::new(start, end, PAGE).unwrap();
    let a: Vec<u64> = (0..12).map(|_| t.alloc(2 * PAGE, PAGE).unwrap()).collect();
    // A hole at a[6]; a lowest fit finds it; a[2] goes before the insert:
    // the slot the search kept moved down by one.
    t.free(a[6]).unwrap();
    let fit = Fit {
        size: 2 * PAGE,
        align: PAGE,
        phase: 0,
        nocross: 0,
        vstart: start,
        vend: end,
    };
    assert_eq!(t.lowest_fit(&fit, &mut 0), Some(a[6]));
    t.free(a[2]).unwrap();
    let r = Rec {
        start: a[6],
        end: a[6] + 2 * PAGE,
        val: 7,
    };
    t.insert_at(r).unwrap();
    t.check();
    assert!(t.areas().contains(&(a[6], a[6] + 2 * PAGE)));
    assert!(!t.areas().contains(&(a[2], a[2] + 2 * PAGE)));
    // A lookup for a removal, then an insert before it, then the removal.
    assert!(t.locate_for_unlink(a[9]).is_some());
    assert_eq!(t.alloc(2 * PAGE, PAGE), Ok(a[2]));
    assert_eq!(t.free(a[9]), Ok(2 * PAGE));
    t.check();
    assert!(!t.areas().contains(&(a[9], a[9] + 2 * PAGE)));
    assert_eq!(t.areas().len(), 11);
}

/// The tree as a space's busy index (`index.rs`): every lookup a space
/// makes answers with the right node, in order, after inserts by address
/// (into any gap, at a leaf's end too) and removals.
#[test]
#[cfg_attr(miri, ignore = "no unsafe code to check, and slow under miri")]
fn as_a_busy_index_every_lookup_names_the_right_node() {
    use crate::busy::BusyIndex;
    use crate::node::{NIL, NodeArena, NodeIdx, NodeTable, VecSource};

    let (start, end) = (0x10_0000, 0x10_0000 + 4096 * PAGE);
    let mut t = <BlockTree as BusyIndex>::new(start, end, PAGE).unwrap();
    let mut s = NodeTable::new(VecSource::new());
    let mut rng = Rng(0x5eed_1dea);
    // (start, node) in address order: the model.
    let mut live: Vec<(u64, NodeIdx)> = Vec::new();
    let v = &mut 0;
    for step in 0..4000 {
        if rng.next() % 3 != 0 || live.is_empty() {
            // A free page anywhere, linked by address (no search before).
            let a = start + (rng.next() % 4096) * PAGE;
            if live.iter().any(|&(x, _)| x == a) {
                continue;
            }
            let n = s.alloc_node().unwrap();
            let node = s.node_mut(n);
            (node.start, node.end) = (a, a + PAGE);
            BusyIndex::insert(&mut t, &mut s, n).unwrap();
            let k = live.partition_point(|&(x, _)| x < a);
            live.insert(k, (a, n));
        } else {
            let k = (rng.next() % live.len() as u64) as usize;
            let (a, n) = live.remove(k);
            if step % 2 == 0 {
                // As `find_unlink` does: a lookup, then the removal.
                assert_eq!(BusyIndex::find_start_for_unlink(&mut t, &s, a, v), n);
            }
            BusyIndex::remove(&mut t, &mut s, n);
            assert_eq!(BusyIndex::find_start(&t, &s, a, v), NIL);
        }
        if step % 97 == 0 {
            assert_eq!(BusyIndex::check(&t, &s), Ok(live.len()));
            assert_eq!(BusyIndex::first(&t, &s), live.first().map_or(NIL, |x| x.1));
            for (k, &(a, n)) in live.iter().enumerate() {
                assert_eq!(BusyIndex::find_start(&t, &s, a, v), n);
                assert_eq!(BusyIndex::floor(&t, &s, a + PAGE - 1, v), n);
                let next = live.get(k + 1).map_or(NIL, |x| x.1);
                let prev = k.checked_sub(1).map_or(NIL, |j| live[j].1);
                assert_eq!(
                    (BusyIndex::next(&t, &s, n), BusyIndex::prev(&t, &s, n)),
                    (next, prev)
                );
            }
            assert_eq!(
                BusyIndex::floor(&t, &s, start, v),
                live.first().filter(|x| x.0 == start).map_or(NIL, |x| x.1)
            );
            assert_eq!(
                BusyIndex::floor(&t, &s, end, v),
                live.last().map_or(NIL, |x| x.1)
            );
        }
    }
    // A range that is not free, or outside the space, is refused.
    if let Some(&(a, _)) = live.first() {
        let n = s.alloc_node().unwrap();
        let node = s.node_mut(n);
        (node.start, node.end) = (a, a + PAGE);
        assert!(BusyIndex::insert(&mut t, &mut s, n).is_err());
        (s.node_mut(n).start, s.node_mut(n).end) = (end, end + PAGE);
        assert!(BusyIndex::insert(&mut t, &mut s, n).is_err());
    }
    assert_eq!(BusyIndex::check(&t, &s), Ok(live.len()));
}

#[test]
#[cfg_attr(miri, ignore = "no unsafe code to check, and minutes under miri")]
fn a_run_of_neighbours_is_removed_by_the_way_kept_from_the_last() {
    use crate::busy::BusyIndex;
    use crate::node::{NIL, NodeArena, NodeIdx, NodeTable, VecSource};

    let (start, end) = (0x10_0000, 0x10_0000 + 8192 * PAGE);
    let mut t = <BlockTree as BusyIndex>::new(start, end, PAGE).unwrap();
    let mut s = NodeTable::new(VecSource::new());
    let mut rng = Rng(0x0dd5_eed5);
    let mut live: Vec<(u64, NodeIdx)> = Vec::new();
    let link = |t: &mut BlockTree, s: &mut NodeTable<VecSource>, live: &mut Vec<_>, a: u64| {
        let n = s.alloc_node().unwrap();
        let node = s.node_mut(n);
        (node.start, node.end) = (a, a + PAGE);
        BusyIndex::insert(t, s, n).unwrap();
        let k = live.partition_point(|&(x, _)| x < a);
        live.insert(k, (a, n));
    };
    // Neighbours with and without gaps between them, over many leaves.
    for p in 0..8192u64 {
        if rng.next() % 4 != 0 {
            link(&mut t, &mut s, &mut live, start + p * PAGE);
        }
    }
    let (v, mut kept) = (&mut 0, 0);
    while live.len() > 8 {
        let k = (rng.next() % (live.len() as u64 - 8)) as usize;
        let run = 1 + (rng.next() % 40) as usize;
        for _ in 0..run.min(live.len() - k - 1) {
            let (a, n) = live.remove(k);
            let hit = t.hint.kind == HintKind::Del && t.hint.found.key == a;
            kept += usize::from(hit);
            assert_eq!(BusyIndex::find_start_in_run(&mut t, &s, a, v), n);
            let r = BlockTree::remove_in_run(&mut t, a).unwrap();
            assert_eq!((r.start, r.val), (a, n));
            // The way kept names the next area, or nothing.
            if t.hint.kind == HintKind::Del {
                assert_eq!(t.hint.found.key, live[k].0);
                let f = t.hint.found;
                assert_eq!(t.leaves[f.slot.leaf as usize].rec[f.slot.i].start, f.key);
            }
        }
        if rng.next() % 3 == 0 {
            // A change in between drops what was kept.
            let a = start + (rng.next() % 8192) * PAGE;
            if !live.iter().any(|&(x, _)| x == a) {
                link(&mut t, &mut s, &mut live, a);
                assert!(t.hint.kind == HintKind::None);
            }
        }
        assert_eq!(t.check_tree(), Ok(live.len()));
        assert_eq!(BusyIndex::check(&t, &s), Ok(live.len()));
    }
    assert!(kept > 1000, "only {kept} removals found the way kept");
    // A lone removal keeps nothing (the copy is not free).
    let (a, _) = live.remove(live.len() / 2);
    BlockTree::remove(&mut t, a).unwrap();
    assert!(t.hint.kind == HintKind::None);
    for &(a, n) in &live {
        assert_eq!(BusyIndex::find_start(&t, &s, a, v), n);
    }
    assert_eq!(BusyIndex::find_start(&t, &s, end, v), NIL);
}
