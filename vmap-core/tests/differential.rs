//! Differential test: random sequences that change size, align, phase,
//! nocross, vstart and vend between calls (the class that crashed boots in
//! 2010), exact-address requests, frees in random order, bogus and double
//! frees. The five policies (`Blocks`, the default with `alloc`, keeps
//! one B+tree in place of the busy and free trees), and that tree alone
//! (`BlockTree`, as the harness measures it), must return identical
//! results, and agree with the brute-force reference model. 8 x 125 000 =
//! 1 000 000 operations per optimised run (the release row); scaled down
//! unoptimised and under miri.

mod common;

use common::{Reference, Req, Rng, span};
use vmap_core::block_tree::BlockTree;
use vmap_core::{
    AllocRequest, Augmented, BTree, Blocks, FreeAreaSearch, FreeVmapCache, Linear, VecSource,
    VirtAddr, VmapError, VmapSpace,
};

const P: u64 = 0x1000;
const BASE: u64 = 0x4000_0000;
const PAGES: u64 = 1024;

fn space<F: FreeAreaSearch>() -> VmapSpace<F, VecSource> {
    VmapSpace::new(
        VirtAddr::new(BASE),
        VirtAddr::new(BASE + PAGES * P),
        P,
        VecSource::new(),
    )
    .unwrap()
}

fn random_req(rng: &mut Rng) -> Req {
    let pages = match rng.below(100) {
        0..70 => 1 + rng.below(8),
        70..95 => 9 + rng.below(56),
        _ => 65 + rng.below(300),
    };
    let mut size = pages * P;
    let mut align = P << if rng.chance(70) { 0 } else { rng.below(9) };
    let mut phase = if rng.chance(80) {
        0
    } else {
        rng.below(align / P) * P
    };
    let mut nocross = if rng.chance(85) {
        0
    } else {
        size.next_power_of_two() << rng.below(3)
    };
    let (mut vstart, mut vend) = if rng.chance(60) {
        (BASE, BASE + PAGES * P)
    } else {
        let a = BASE + rng.below(PAGES) * P;
        let b = BASE + rng.below(PAGES + 1) * P;
        (a.min(b), a.max(b) + P * rng.below(2))
    };
    // Now and then a bad parameter: every error path must agree too.
    if rng.chance(3) {
        match rng.below(9) {
            0 => size = 0,
            1 => size += 1,
            2 => align = 3 * P,
            3 => align = P / 2,
            4 => phase = align,
            5 => nocross = size / 2,
            6 => vstart = vend,
            7 => vend = BASE + (PAGES + 1) * P,
            _ => nocross = 3 * P,
        }
    }
    let exact = rng.chance(8).then(|| BASE + rng.below(PAGES) * P);
    Req {
        size,
        align,
        phase,
        nocross,
        vstart,
        vend,
        exact,
    }
}

fn to_request(r: &Req) -> AllocRequest {
    let mut q = AllocRequest::new(
        r.size,
        r.align,
        VirtAddr::new(r.vstart),
        VirtAddr::new(r.vend),
    )
    .phase(r.phase)
    .nocross(r.nocross);
    if let Some(a) = r.exact {
        q.exact = Some(VirtAddr::new(a));
        q.vstart = VirtAddr::new(a);
        q.vend = VirtAddr::new(a.wrapping_add(r.size));
    }
    q
}

fn run(seed: u64, ops: usize) {
    let mut rng = Rng(seed);
    let mut lin = space::<Linear>();
    let mut fac = space::<FreeVmapCache>();
    let mut aug = space::<Augmented>();
    let mut bt = space::<BTree>();
    let mut bl = space::<Blocks>();
    let mut blk = BlockTree::new(BASE, BASE + PAGES * P, P).unwrap();
    let mut reference = Reference::new(BASE, BASE + PAGES * P, P);
    let mut freed: Vec<u64> = Vec::new();
    for op in 0..ops {
        let roll = rng.below(100);
        if roll < 55 || reference.busy.is_empty() {
            let r = random_req(&mut rng);
            let q = to_request(&r);
            let want = reference.alloc(&r);
            let got = [
                lin.alloc_request(&q).map(|a| span(&a).0),
                fac.alloc_request(&q).map(|a| span(&a).0),
                aug.alloc_request(&q).map(|a| span(&a).0),
                bt.alloc_request(&q).map(|a| span(&a).0),
                bl.alloc_request(&q).map(|a| span(&a).0),
            ];
            for g in got {
                assert_eq!(g, want, "seed {seed} op {op}: {r:?}");
            }
            // A plain request over the whole space also goes through
            // `alloc`, which checks it itself (errors included).
            let whole = (r.phase, r.nocross, r.exact, r.vstart, r.vend)
                == (0, 0, None, BASE, BASE + PAGES * P);
            let got = if whole && op % 2 == 1 {
                blk.alloc(r.size, r.align)
            } else {
                blk.alloc_request(&q)
            };
            assert_eq!(got, want, "seed {seed} op {op}: {r:?}");
        } else if roll < 93 {
            let k = rng.below(reference.busy.len() as u64) as usize;
            let addr = reference.busy[k].0;
            let want = reference.free(addr).unwrap();
            let a = VirtAddr::new(addr);
            // Exercise every free entry point; all unlink the same area.
            let got = match op % 3 {
                0 => [
                    lin.find_unlink(a),
                    fac.free(a),
                    aug.free_two_search(a),
                    bt.free(a),
                    bl.find_unlink(a),
                ],
                1 => [
                    lin.free(a),
                    fac.free_two_search(a),
                    aug.find_unlink(a),
                    bt.free_two_search(a),
                    bl.free(a),
                ],
                _ => [
                    lin.free_two_search(a),
                    fac.find_unlink(a),
                    aug.free(a),
                    bt.find_unlink(a),
                    bl.free_two_search(a),
                ],
            };
            for g in got {
                assert_eq!(g.map(|x| span(&x)), Ok(want), "seed {seed} op {op}");
            }
            assert_eq!(blk.free(addr), Ok(want.1 - want.0), "seed {seed} op {op}");
            freed.push(addr);
        } else if roll < 97 {
            // Double free or unknown address: NotFound, state unchanged.
            let addr = if !freed.is_empty() && rng.chance(50) {
                freed[rng.below(freed.len() as u64) as usize]
            } else {
                BASE + rng.below(PAGES) * P + if rng.chance(20) { 8 } else { 0 }
            };
            let want = reference.free(addr);
            if let Ok(w) = want {
                // It happened to be live: put it back in the reference and
                // free it everywhere.
                for g in [
                    lin.free(VirtAddr::new(addr)),
                    fac.free(VirtAddr::new(addr)),
                    aug.free(VirtAddr::new(addr)),
                    bt.free(VirtAddr::new(addr)),
                    bl.free(VirtAddr::new(addr)),
                ] {
                    assert_eq!(g.map(|x| span(&x)), Ok(w));
                }
                assert_eq!(blk.free(addr), Ok(w.1 - w.0));
            } else {
                let a = VirtAddr::new(addr);
                for g in [
                    lin.find_unlink(a),
                    fac.find_unlink(a),
                    aug.find_unlink(a),
                    bt.find_unlink(a),
                    bl.find_unlink(a),
                ] {
                    assert_eq!(g, Err(VmapError::NotFound { addr }), "seed {seed} op {op}");
                }
                assert_eq!(blk.free(addr), Err(VmapError::NotFound { addr }));
            }
        } else {
            // Around the space too: below its start, at and past its end.
            let addr = BASE - 2 * P + rng.below((PAGES + 4) * P);
            let want = reference.find(addr);
            let a = VirtAddr::new(addr);
            for g in [
                lin.find(a),
                fac.find(a),
                aug.find(a),
                bt.find(a),
                bl.find(a),
            ] {
                assert_eq!(g.map(|x| span(&x)), want);
            }
            assert_eq!(blk.find_area(addr), want);
        }
        if op % CHECK_EVERY == 0 {
            lin.check_invariants().unwrap();
            fac.check_invariants().unwrap();
            aug.check_invariants().unwrap();
            bt.check_invariants().unwrap();
            bl.check_invariants().unwrap();
            let live: Vec<_> = aug.iter().map(|a| span(&a)).collect();
            assert_eq!(live, reference.busy);
            assert_eq!(blk.areas(), reference.busy);
            assert_eq!(lin.iter().count(), live.len());
            let by_blocks: Vec<_> = bl.iter().map(|a| span(&a)).collect();
            assert_eq!(by_blocks, live);
        }
    }
    // Free everything: nothing leaked, the augmented tree is one block again.
    for (s, _) in reference.busy.clone() {
        let a = VirtAddr::new(s);
        lin.free(a).unwrap();
        fac.free(a).unwrap();
        aug.free(a).unwrap();
        bt.free(a).unwrap();
        bl.free(a).unwrap();
        blk.free(s).unwrap();
    }
    assert!(blk.is_empty());
    assert_eq!(blk.alloc(PAGES * P, P), Ok(BASE));
    assert_eq!(lin.nodes_in_use(), 0);
    assert_eq!(fac.nodes_in_use(), 0);
    assert_eq!(aug.nodes_in_use(), 1);
    assert_eq!(aug.free_bytes(), PAGES * P);
    aug.check_invariants().unwrap();
    assert_eq!(bt.free_bytes(), PAGES * P);
    bt.check_invariants().unwrap();
    assert_eq!(bl.free_bytes(), PAGES * P);
    assert_eq!(bl.nodes_in_use(), 0);
    assert!(bl.is_empty());
    bl.check_invariants().unwrap();
}

/// Operations per seed: 8 x 125 000 = 1M in the optimised build (the
/// release row), fewer unoptimised (the debug rows and qemu, ~10x slower)
/// and far fewer under miri.
const OPS: usize = if cfg!(miri) {
    120
} else if cfg!(debug_assertions) {
    25_000
} else {
    125_000
};
/// Operations between whole-structure checks (a check walks every node of
/// four spaces: most of the time under miri if made after each operation).
const CHECK_EVERY: usize = if cfg!(miri) { 20 } else { 1024 };

#[test]
fn differential_seed_1() {
    run(1, OPS);
}
#[test]
fn differential_seed_2() {
    run(2, OPS);
}
#[test]
fn differential_seed_3() {
    run(3, OPS);
}
#[test]
fn differential_seed_4() {
    run(4, OPS);
}
#[test]
fn differential_seed_5() {
    run(5, OPS);
}
#[test]
fn differential_seed_6() {
    run(6, OPS);
}
#[test]
fn differential_seed_7() {
    run(7, OPS);
}
#[test]
fn differential_seed_8() {
    run(8, OPS);
}
