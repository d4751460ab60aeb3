//! `find_unlink_batch` against `find_unlink` one address at a time: the same
//! outcome for every address (unknown and repeated ones included), the same
//! areas and free space after, on every policy, in ascending, descending and
//! mixed orders.

use vmap_core::{
    Augmented, Blocks, FreeAreaSearch, FreeVmapCache, Linear, VecSource, VirtAddr, VmapArea,
    VmapError, VmapSpace,
};

const P: u64 = 0x1000;
const S: u64 = 0x10_0000;
const E: u64 = S + 4096 * P;

type Outcome = Vec<(u64, Result<VmapArea, VmapError>)>;

/// Areas in the test space (fewer under miri, where the linear policy's
/// walks are slow).
const AREAS: u64 = if cfg!(miri) { 20 } else { 300 };

/// Areas of 1..4 pages, some touching, some with holes between them.
fn space<F: FreeAreaSearch>() -> (VmapSpace<F, VecSource>, Vec<u64>) {
    let mut s = VmapSpace::new(VirtAddr::new(S), VirtAddr::new(E), P, VecSource::new()).unwrap();
    let mut starts = Vec::new();
    for k in 0..AREAS {
        let a = s
            .alloc((k % 4 + 1) * P, P, VirtAddr::new(S), VirtAddr::new(E))
            .unwrap();
        starts.push(a.va_start.as_u64());
    }
    // Holes: every fifth area goes now.
    for a in starts.iter().step_by(5) {
        s.free(VirtAddr::new(*a)).unwrap();
    }
    let live = starts
        .iter()
        .copied()
        .enumerate()
        .filter(|(k, _)| k % 5 != 0);
    (s, live.map(|(_, a)| a).collect())
}

/// Every area's start, freed ones (now inside free blocks) included.
fn all_starts() -> Vec<u64> {
    let mut s =
        VmapSpace::<Augmented, _>::new(VirtAddr::new(S), VirtAddr::new(E), P, VecSource::new())
            .unwrap();
    (0..AREAS)
        .map(|k| {
            s.alloc((k % 4 + 1) * P, P, VirtAddr::new(S), VirtAddr::new(E))
                .unwrap()
                .va_start
                .as_u64()
        })
        .collect()
}

fn check<F: FreeAreaSearch>(addrs: &[u64]) {
    let (mut one, _) = space::<F>();
    let (mut batch, _) = space::<F>();
    let want: Outcome = addrs
        .iter()
        .map(|&a| (a, one.find_unlink(VirtAddr::new(a))))
        .collect();
    let mut got: Outcome = Vec::new();
    batch.find_unlink_batch(addrs.iter().map(|&a| VirtAddr::new(a)), |a, r| {
        got.push((a.as_u64(), r))
    });
    assert_eq!(got, want, "{}", F::NAME);
    one.check_invariants().unwrap();
    batch.check_invariants().unwrap();
    assert_eq!(
        batch.iter().collect::<Vec<_>>(),
        one.iter().collect::<Vec<_>>(),
        "{}",
        F::NAME
    );
    assert_eq!(batch.free_bytes(), one.free_bytes(), "{}", F::NAME);
    // Placement afterwards is unchanged too.
    for _ in 0..50 {
        let r = (
            one.alloc(3 * P, P, VirtAddr::new(S), VirtAddr::new(E)),
            batch.alloc(3 * P, P, VirtAddr::new(S), VirtAddr::new(E)),
        );
        assert_eq!(r.0, r.1, "{}", F::NAME);
    }
}

fn orders() -> Vec<Vec<u64>> {
    let (_, live) = space::<Augmented>();
    let mut asc = live.clone();
    asc.push(S + 1); // unknown (not an area's start)
    asc.push(live[3]); // double free, after its first free
    let mut desc = live.clone();
    desc.reverse();
    // Runs of ascending addresses broken by jumps and repeats.
    let mixed: Vec<u64> = (0..live.len())
        .map(|k| live[(k * 37) % live.len()])
        .chain([live[0], live[0], E + P])
        .collect();
    let part: Vec<u64> = live.iter().copied().filter(|a| a % 3 != 0).collect();
    // Runs of neighbours that cross leaves without emptying them.
    let runs: Vec<u64> = live
        .iter()
        .copied()
        .enumerate()
        .filter(|(k, _)| k % 13 > 3)
        .map(|(_, a)| a)
        .collect();
    // Ascending, with the starts of freed areas between live ones: the
    // batch must not take a free block for the next busy area.
    let with_holes = all_starts();
    vec![asc, desc, mixed, part, runs, with_holes, Vec::new()]
}

#[test]
fn batch_matches_one_at_a_time() {
    for addrs in orders() {
        check::<Linear>(&addrs);
        check::<FreeVmapCache>(&addrs);
        check::<Augmented>(&addrs);
        check::<Blocks>(&addrs);
    }
}
