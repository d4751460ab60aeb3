//! Every error case of the issue, each checking that the state is unchanged
//! (same areas, same free bytes, invariants hold, the next allocation lands
//! where it would have).

use vmap_core::{
    AllocRequest, Augmented, BTree, FixedPool, FreeAreaSearch, FreeVmapCache, Linear, NodeSource,
    VecSource, VirtAddr, VmapArea, VmapError, VmapSpace,
};

const P: u64 = 0x1000;
const S: u64 = 0x10_0000;
const E: u64 = S + 64 * P;

fn va(x: u64) -> VirtAddr {
    VirtAddr::new(x)
}

/// A space with a few areas and holes, plus a snapshot of its state.
fn setup<F: FreeAreaSearch>() -> VmapSpace<F, VecSource> {
    let mut s = VmapSpace::new(va(S), va(E), P, VecSource::new()).unwrap();
    for _ in 0..6 {
        s.alloc(2 * P, P, va(S), va(E)).unwrap();
    }
    s.free(va(S + 2 * P)).unwrap();
    s.free(va(S + 6 * P)).unwrap();
    s
}

fn snapshot<F: FreeAreaSearch, N: NodeSource>(s: &VmapSpace<F, N>) -> (Vec<VmapArea>, u64) {
    s.check_invariants().unwrap();
    (s.iter().collect(), s.free_bytes())
}

fn expect_unchanged<F: FreeAreaSearch>(req: AllocRequest, err: VmapError) {
    let mut s = setup::<F>();
    let before = snapshot(&s);
    assert_eq!(s.alloc_request(&req), Err(err), "{}: {req:?}", F::NAME);
    assert_eq!(snapshot(&s), before, "{}", F::NAME);
    // The next plain allocation lands where it would have before.
    let mut t = setup::<F>();
    assert_eq!(s.alloc(P, P, va(S), va(E)), t.alloc(P, P, va(S), va(E)));
}

fn all_policies(req: AllocRequest, err: VmapError) {
    expect_unchanged::<Linear>(req, err);
    expect_unchanged::<FreeVmapCache>(req, err);
    expect_unchanged::<Augmented>(req, err);
}

fn req(size: u64, align: u64, vstart: u64, vend: u64) -> AllocRequest {
    AllocRequest::new(size, align, va(vstart), va(vend))
}

#[test]
fn size_zero() {
    all_policies(req(0, P, S, E), VmapError::ZeroSize);
}

#[test]
fn size_not_page_multiple() {
    all_policies(
        req(P + 1, P, S, E),
        VmapError::NotPageMultiple {
            what: "size",
            value: P + 1,
            page_size: P,
        },
    );
}

#[test]
fn align_not_page_multiple() {
    all_policies(
        req(P, 512, S, E),
        VmapError::NotPageMultiple {
            what: "align",
            value: 512,
            page_size: P,
        },
    );
}

#[test]
fn align_not_power_of_two() {
    all_policies(
        req(P, 3 * P, S, E),
        VmapError::AlignNotPowerOfTwo { align: 3 * P },
    );
    all_policies(req(P, 0, S, E), VmapError::AlignNotPowerOfTwo { align: 0 });
}

#[test]
fn vstart_not_below_vend() {
    all_policies(
        req(P, P, S + 4 * P, S + 4 * P),
        VmapError::EmptyRange {
            vstart: S + 4 * P,
            vend: S + 4 * P,
        },
    );
    all_policies(
        req(P, P, S + 5 * P, S + 4 * P),
        VmapError::EmptyRange {
            vstart: S + 5 * P,
            vend: S + 4 * P,
        },
    );
}

#[test]
fn vstart_plus_size_overflows() {
    let vstart = u64::MAX - 2 * P + 1;
    all_policies(
        req(4 * P, P, vstart, u64::MAX - P + 1),
        VmapError::Overflow {
            vstart,
            size: 4 * P,
        },
    );
    let exact = AllocRequest::exact(va(u64::MAX - P + 1), 2 * P, P);
    all_policies(
        exact,
        VmapError::Overflow {
            vstart: u64::MAX - P + 1,
            size: 2 * P,
        },
    );
}

#[test]
fn range_outside_space() {
    let e = |vstart, vend| VmapError::OutsideSpace {
        vstart,
        vend,
        start: S,
        end: E,
    };
    all_policies(req(P, P, S - P, E), e(S - P, E));
    all_policies(req(P, P, S, E + P), e(S, E + P));
}

#[test]
fn phase_not_below_align() {
    all_policies(
        req(P, 2 * P, S, E).phase(2 * P),
        VmapError::PhaseTooLarge {
            phase: 2 * P,
            align: 2 * P,
        },
    );
}

#[test]
fn nocross_smaller_than_size() {
    all_policies(
        req(4 * P, P, S, E).nocross(2 * P),
        VmapError::NocrossTooSmall {
            nocross: 2 * P,
            size: 4 * P,
        },
    );
    all_policies(
        req(P, P, S, E).nocross(3 * P),
        VmapError::NocrossNotPowerOfTwo { nocross: 3 * P },
    );
}

#[test]
fn no_space_says_what_was_asked_and_where() {
    let want = VmapError::NoSpace {
        size: 64 * P,
        align: P,
        vstart: S,
        vend: E,
    };
    all_policies(req(64 * P, P, S, E), want);
    // An exact request over a busy area.
    all_policies(
        AllocRequest::exact(va(S + 4 * P), P, P),
        VmapError::NoSpace {
            size: P,
            align: P,
            vstart: S + 4 * P,
            vend: S + 5 * P,
        },
    );
    let msg = format!("{want}");
    assert!(msg.contains("0x40000") && msg.contains("0x100000"), "{msg}");
}

fn free_errors<F: FreeAreaSearch>() {
    let mut s = setup::<F>();
    let before = snapshot(&s);
    for addr in [S + 2 * P, S + P, E + P, 0, S + 8 * P + 1] {
        assert_eq!(s.free(va(addr)), Err(VmapError::NotFound { addr }));
        assert_eq!(s.find_unlink(va(addr)), Err(VmapError::NotFound { addr }));
        assert_eq!(
            s.free_two_search(va(addr)),
            Err(VmapError::NotFound { addr })
        );
        assert_eq!(snapshot(&s), before);
    }
    // Double free.
    s.free(va(S)).unwrap();
    let after = snapshot(&s);
    assert_eq!(s.free(va(S)), Err(VmapError::NotFound { addr: S }));
    assert_eq!(snapshot(&s), after);
    let msg = format!("{}", VmapError::NotFound { addr: S });
    assert!(msg.contains("nonexistent vm area"));
}

#[test]
fn unknown_and_double_free_are_not_found() {
    free_errors::<Linear>();
    free_errors::<FreeVmapCache>();
    free_errors::<Augmented>();
}

fn exhaustion<F: FreeAreaSearch>(cap_busy: usize) {
    let pool = FixedPool::<8>::new();
    let mut s = VmapSpace::<F, _>::new(va(S), va(E), P, &pool).unwrap();
    let mut got = Vec::new();
    loop {
        // Every other page, so the augmented policy needs split nodes too.
        let n = got.len() as u64;
        match s.alloc_exact(va(S + 2 * n * P + P), P) {
            Ok(a) => got.push(a),
            Err(e) => {
                assert_eq!(e, VmapError::NodePoolExhausted, "{}", F::NAME);
                break;
            }
        }
    }
    assert_eq!(got.len(), cap_busy, "{}", F::NAME);
    let before = snapshot(&s);
    let n = got.len() as u64;
    assert_eq!(
        s.alloc_exact(va(S + 2 * n * P + P), P),
        Err(VmapError::NodePoolExhausted)
    );
    assert_eq!(snapshot(&s), before);
    // Frees never need a node.
    for a in got {
        s.free(a.va_start).unwrap();
    }
    s.check_invariants().unwrap();
}

#[test]
fn node_pool_exhausted_is_an_error() {
    exhaustion::<Linear>(8);
    exhaustion::<FreeVmapCache>(8);
    // 1 node for the initial block, then each exact page in the middle takes
    // a busy node and a split node.
    exhaustion::<Augmented>(3);
}

#[test]
fn node_pool_exhaustion_leaves_state_unchanged() {
    let pool = FixedPool::<3>::new();
    let mut s = VmapSpace::<Augmented, _>::new(va(S), va(E), P, &pool).unwrap();
    s.alloc_exact(va(S + P), P).unwrap(); // 1 busy + 1 split: pool full
    let before = snapshot(&s);
    assert_eq!(
        s.alloc_exact(va(S + 8 * P), P),
        Err(VmapError::NodePoolExhausted)
    );
    assert_eq!(
        s.alloc(P, P, va(S), va(E)),
        Err(VmapError::NodePoolExhausted)
    );
    assert_eq!(snapshot(&s), before);
    assert_eq!(s.nodes_in_use(), 3);
}

#[test]
fn constructor_errors() {
    let v = || VecSource::new();
    assert_eq!(
        VmapSpace::<Augmented, _>::new(va(S), va(E), 3000, v()).err(),
        Some(VmapError::BadPageSize { page_size: 3000 })
    );
    assert_eq!(
        VmapSpace::<Augmented, _>::new(va(S + 1), va(E), P, v()).err(),
        Some(VmapError::NotPageMultiple {
            what: "start",
            value: S + 1,
            page_size: P
        })
    );
    assert_eq!(
        VmapSpace::<Augmented, _>::new(va(E), va(S), P, v()).err(),
        Some(VmapError::EmptyRange { vstart: E, vend: S })
    );
    let none = FixedPool::<0>::new();
    assert_eq!(
        VmapSpace::<Augmented, _>::new(va(S), va(E), P, &none).err(),
        Some(VmapError::NodePoolExhausted)
    );
}

#[test]
fn error_is_core_error() {
    fn takes(_: &dyn core::error::Error) {}
    takes(&VmapError::ZeroSize);
}

/// `resize` (vrealloc's growth in place): grows into free space, refuses a
/// taken or outside range with nothing changed, on every policy.
#[test]
fn resize_grows_in_place_or_changes_nothing() {
    fn check<F: vmap_core::FreeAreaSearch>() {
        use vmap_core::{VecSource, VmapSpace};
        const P: u64 = 0x1000;
        let (s, e) = (VirtAddr::new(0x10_0000), VirtAddr::new(0x10_0000 + 16 * P));
        let mut sp = VmapSpace::<F, _>::new(s, e, P, VecSource::new()).unwrap();
        let a = sp.alloc(2 * P, P, s, e).unwrap();
        let b = sp
            .alloc(P, P, VirtAddr::new(s.as_u64() + 8 * P), e)
            .unwrap();
        let g = sp.resize(a.va_start, 8 * P).unwrap();
        assert_eq!((g.va_start, g.size()), (a.va_start, 8 * P));
        let before: Vec<_> = sp.iter().collect();
        assert!(matches!(
            sp.resize(a.va_start, 9 * P),
            Err(VmapError::NoSpace { .. })
        ));
        assert!(matches!(
            sp.resize(b.va_start, 16 * P),
            Err(VmapError::OutsideSpace { .. })
        ));
        assert!(matches!(
            sp.resize(VirtAddr::new(s.as_u64() + P), 2 * P),
            Err(VmapError::NotFound { .. })
        ));
        assert_eq!(sp.iter().collect::<Vec<_>>(), before, "nothing changed");
        sp.check_invariants().unwrap();
        // Shrinking works the same way.
        assert_eq!(sp.resize(a.va_start, P).unwrap().size(), P);
        let c = sp.alloc(7 * P, P, s, e).unwrap();
        assert_eq!(c.va_start.as_u64(), s.as_u64() + P);
        sp.check_invariants().unwrap();
    }
    check::<vmap_core::Augmented>();
    check::<vmap_core::Linear>();
    check::<vmap_core::FreeVmapCache>();
}

/// The B-tree policy may need nodes to free (a new free block between two
/// busy areas splits a full leaf). Over a pool that cannot grow, a free it
/// cannot serve is refused with `NodePoolExhausted`, nothing changed and the
/// area still allocated, and succeeds once nodes are back; it used to panic.
#[test]
fn a_btree_free_that_needs_a_node_it_cannot_get_is_refused() {
    // Fewer under miri: each free takes two snapshots of the whole space.
    const SLOTS: usize = if cfg!(miri) { 64 } else { 200 };
    const END: u64 = S + 4096 * P;
    let pool = FixedPool::<SLOTS>::new();
    let mut s = VmapSpace::<BTree, _>::new(va(S), va(END), P, &pool).unwrap();
    // Areas back to back until the pool is spent.
    let mut got = Vec::new();
    while let Ok(a) = s.alloc(P, P, va(S), va(END)) {
        got.push(a.va_start);
    }
    assert!(got.len() > 20, "{}", got.len());
    // Free every other one: each leaves a block between two busy areas.
    let mut refused = Vec::new();
    for &a in got.iter().skip(1).step_by(2) {
        let before = snapshot(&s);
        match s.free(a) {
            Ok(area) => assert_eq!(area.va_start, a),
            Err(e) => {
                assert_eq!(e, VmapError::NodePoolExhausted);
                assert_eq!(snapshot(&s), before, "a refused free changed nothing");
                refused.push(a);
            }
        }
    }
    assert!(
        !refused.is_empty(),
        "the pool never ran dry: the test tests nothing"
    );
    // The rest, and the refused ones again, until all are free: frees
    // that merge give nodes back, so every round makes progress.
    let mut left: Vec<_> = got.iter().step_by(2).copied().chain(refused).collect();
    while !left.is_empty() {
        let n = left.len();
        left.retain(|&a| match s.free(a) {
            Ok(_) => false,
            Err(e) => {
                assert_eq!(e, VmapError::NodePoolExhausted);
                true
            }
        });
        assert!(left.len() < n, "no free went through: {left:x?}");
    }
    assert_eq!(snapshot(&s), (Vec::new(), END - S));
}
