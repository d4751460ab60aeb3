//! The `BlockTree` prototype (issue 20) places every plain request (size
//! and alignment, the whole space) where `VmapSpace` does, frees what it
//! does, finds the same area around an address and refuses the same bogus
//! frees, over long random runs that fill and fragment a small space (so
//! requests also fail for want of room). Its own invariants are checked by
//! its unit tests.

mod common;

use common::Rng;
use vmap_core::block_tree::{BlockTree, BlockTreeError};
use vmap_core::{DefaultPolicy, VecSource, VirtAddr, VmapError, VmapSpace};

const P: u64 = 0x1000;
const BASE: u64 = 0x4000_0000;
const PAGES: u64 = 4096;

/// Operations per seed: optimised (the release row) 250 000, unoptimised
/// 20 000, under miri a few.
const OPS: usize = if cfg!(miri) {
    200
} else if cfg!(debug_assertions) {
    20_000
} else {
    250_000
};

fn run(seed: u64) {
    let mut rng = Rng(seed);
    let mut t = BlockTree::new(BASE, BASE + PAGES * P).unwrap();
    let mut s = VmapSpace::<DefaultPolicy, _>::new(
        VirtAddr::new(BASE),
        VirtAddr::new(BASE + PAGES * P),
        P,
        VecSource::new(),
    )
    .unwrap();
    let (lo, hi) = (s.start(), s.end());
    let mut live: Vec<u64> = Vec::new();
    let mut freed: Vec<u64> = Vec::new();
    for op in 0..OPS {
        let roll = rng.below(100);
        if roll < 52 || live.is_empty() {
            let pages = match rng.below(100) {
                0..75 => 1 + rng.below(16),
                75..97 => 17 + rng.below(48),
                _ => 65 + rng.below(400),
            };
            let align = P << if rng.chance(75) { 0 } else { rng.below(8) };
            let want = s
                .alloc(pages * P, align, lo, hi)
                .map(|a| a.va_start.as_u64());
            let got = t.alloc(pages * P, align);
            match want {
                Ok(a) => {
                    assert_eq!(got, Ok(a), "seed {seed} op {op}");
                    live.push(a);
                }
                Err(VmapError::NoSpace { .. }) => {
                    assert_eq!(got, Err(BlockTreeError::NoSpace), "seed {seed} op {op}")
                }
                Err(e) => panic!("seed {seed} op {op}: {e}"),
            }
        } else if roll < 94 {
            let a = live.swap_remove(rng.below(live.len() as u64) as usize);
            let want = s.find_unlink(VirtAddr::new(a)).unwrap();
            assert_eq!(t.free(a), Ok(want.size()), "seed {seed} op {op}");
            freed.push(a);
        } else if roll < 97 {
            // A double free, or an address no area starts at.
            let a = if !freed.is_empty() && rng.chance(50) {
                freed[rng.below(freed.len() as u64) as usize]
            } else {
                BASE + rng.below(PAGES) * P + if rng.chance(20) { 8 } else { 0 }
            };
            if live.contains(&a) {
                continue;
            }
            assert!(s.find_unlink(VirtAddr::new(a)).is_err());
            assert_eq!(t.free(a), Err(BlockTreeError::NotFound(a)));
        } else {
            let a = BASE + rng.below(PAGES * P);
            let want = s
                .find(VirtAddr::new(a))
                .map(|x| (x.va_start.as_u64(), x.va_end.as_u64()));
            assert_eq!(t.find_area(a), want, "seed {seed} op {op}");
        }
    }
    assert_eq!(t.len(), live.len());
    for a in live {
        assert_eq!(
            t.free(a).ok(),
            s.find_unlink(VirtAddr::new(a)).ok().map(|x| x.size())
        );
    }
    assert!(t.is_empty());
    // Empty again: the whole space is one gap.
    assert_eq!(t.alloc(PAGES * P, P), Ok(BASE));
}

#[test]
fn places_like_vmap_space_seed_1() {
    run(1);
}

#[test]
fn places_like_vmap_space_seed_2() {
    run(2);
}

#[test]
fn places_like_vmap_space_seed_3() {
    run(3);
}

#[test]
fn places_like_vmap_space_seed_4() {
    run(4);
}
