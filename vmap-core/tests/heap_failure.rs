//! `Blocks` under a heap that cannot grow: its B+tree nodes and the
//! space's node table (`VecSource`) come from the global heap, and a
//! refused allocation must make `VmapSpace::alloc` fail with
//! `NodePoolExhausted` and change nothing (never abort), frees must never
//! allocate, and `resize` must not lose its area. The global allocator
//! here refuses every allocation of the thread that switches it on (other
//! test threads are unaffected).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use vmap_core::{
    AllocRequest, Blocks, TreeNode, VecSource, VirtAddr, VmapArea, VmapError, VmapSpace,
};

thread_local! {
    // `const` initialisers over `Cell`s: reaching them allocates nothing
    // and registers no destructor, so the allocator below may read them.
    /// Whether this thread's allocations are refused.
    static FAIL: Cell<bool> = const { Cell::new(false) };
    /// Allocations refused on this thread so far.
    static REFUSED: Cell<usize> = const { Cell::new(0) };
    /// The alignment of the last one refused (who asked: the node table's
    /// blocks are aligned to `TreeNode`, the tree's vectors less).
    static REFUSED_ALIGN: Cell<usize> = const { Cell::new(0) };
}

/// `System`, refusing every allocation (and reallocation) of a thread that
/// switched [`FAIL`] on, except while it panics (so a failed assertion or a
/// panic in the code under test reports normally instead of aborting).
struct Switchable;

impl Switchable {
    fn refuse(layout: Layout) -> bool {
        if !FAIL.try_with(Cell::get).unwrap_or(false) || std::thread::panicking() {
            return false;
        }
        let _ = REFUSED.try_with(|n| n.set(n.get() + 1));
        let _ = REFUSED_ALIGN.try_with(|a| a.set(layout.align()));
        true
    }
}

// SAFETY: every call is `System`'s with the caller's arguments, or returns
// null (refusing, which `GlobalAlloc` allows) without touching memory.
unsafe impl GlobalAlloc for Switchable {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if Self::refuse(layout) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if Self::refuse(layout) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if Self::refuse(layout) {
            // The old block stays as it was, as a failed `realloc` must.
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on; every block came from
        // `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static HEAP: Switchable = Switchable;

/// Runs `f` with this thread's heap allocations refused.
fn heap_failing<R>(f: impl FnOnce() -> R) -> R {
    struct On;
    impl Drop for On {
        fn drop(&mut self) {
            FAIL.set(false);
        }
    }
    FAIL.set(true);
    let _on = On;
    f()
}

fn refused() -> usize {
    REFUSED.get()
}

const PAGE: u64 = 0x1000;
const START: u64 = 0x1000_0000;
/// 256 Ki pages: room for every test.
const END: u64 = START + (1 << 30);
/// Areas in a tree of height 2 or more (at most 16 records a leaf, 16
/// children a node); under Miri, which is here for the unsafe code of the
/// allocator and the node table, a few leaves (seconds, not minutes).
const DEEP: usize = if cfg!(miri) { 60 } else { 2_000 };

type Space = VmapSpace<Blocks, VecSource>;

fn va(x: u64) -> VirtAddr {
    VirtAddr::new(x)
}

fn new_space() -> Space {
    Space::new(va(START), va(END), PAGE, VecSource::new()).unwrap()
}

/// One page anywhere: the lowest free page.
fn page() -> AllocRequest {
    AllocRequest::new(PAGE, PAGE, va(START), va(END))
}

/// Exactly page `p` of the space.
fn exact_page(p: u64) -> AllocRequest {
    AllocRequest::exact(va(START + p * PAGE), PAGE, PAGE)
}

/// A space of `n` one-page areas from its start, allocated lowest fit with
/// the heap working.
fn filled(n: usize) -> (Space, Vec<VmapArea>) {
    let mut space = new_space();
    let areas = (0..n)
        .map(|_| space.alloc_request(&page()).unwrap())
        .collect();
    (space, areas)
}

/// Asserts that the space holds exactly `areas` (any order): invariants,
/// iteration, `find` on both ends of each, counts, bytes and nodes.
fn assert_holds(space: &Space, areas: &[VmapArea]) {
    space.check_invariants().unwrap();
    let mut want = areas.to_vec();
    want.sort_by_key(|a| a.va_start);
    assert_eq!(space.iter().collect::<Vec<_>>(), want, "the areas");
    for a in areas {
        assert_eq!(space.find(a.va_start), Some(*a));
        assert_eq!(space.find(va(a.va_end.as_u64() - 1)), Some(*a));
    }
    assert_eq!(space.len(), areas.len());
    assert_eq!(space.nodes_in_use(), areas.len(), "one node per area");
    let bytes: u64 = areas.iter().map(VmapArea::size).sum();
    assert_eq!(space.busy_bytes(), bytes);
    assert_eq!(space.free_bytes(), END - START - bytes);
}

/// Which allocation the space was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Culprit {
    /// `VecSource` growing the node table (blocks aligned to `TreeNode`).
    NodeTable,
    /// The block tree reserving for a split (its `Vec`s).
    BlockTree,
}

fn culprit() -> Culprit {
    if REFUSED_ALIGN.get() == align_of::<TreeNode>() {
        Culprit::NodeTable
    } else {
        Culprit::BlockTree
    }
}

/// A refusal [`alloc_until_refused`] stopped at.
struct Refusal {
    /// Requests made, the refused one included.
    tries: usize,
    /// The refused request.
    req: AllocRequest,
}

/// Makes the requests `req(0), req(1), …`, each with the heap failing,
/// recording each area in `areas`, until one fails because `want` was
/// refused memory; at most `max_tries`. Every request before it succeeded
/// (a success asked the heap for nothing); every failure is exactly
/// `NodePoolExhausted` after a refused allocation, with the space left
/// holding `areas` and nothing else. A failure of the other culprit is
/// retried with the heap working (it must succeed) and the run goes on.
fn alloc_until_refused(
    space: &mut Space,
    areas: &mut Vec<VmapArea>,
    want: Culprit,
    max_tries: usize,
    mut req: impl FnMut(usize) -> AllocRequest,
) -> Refusal {
    for i in 0..max_tries {
        let q = req(i);
        let before = refused();
        let r = heap_failing(|| space.alloc_request(&q));
        match r {
            Ok(a) => {
                assert_eq!(refused(), before, "try {i}: succeeded after a refusal");
                if let Some(at) = q.exact {
                    assert_eq!(a.va_start, at);
                }
                areas.push(a);
            }
            Err(e) => {
                assert_eq!(e, VmapError::NodePoolExhausted, "try {i}: {q:?}");
                assert!(refused() > before, "try {i}: {e:?} without a refusal");
                let who = culprit();
                assert_holds(space, areas);
                if who == want {
                    return Refusal {
                        tries: i + 1,
                        req: q,
                    };
                }
                let a = space.alloc_request(&q).expect("the heap works again");
                areas.push(a);
            }
        }
    }
    panic!("no allocation refused by the {want:?} in {max_tries} tries");
}

/// After a refusal: the same request succeeds with the heap working, and
/// lands where it would have.
fn retry(space: &mut Space, areas: &mut Vec<VmapArea>, r: &Refusal) -> VmapArea {
    let a = space.alloc_request(&r.req).expect("the heap works again");
    if let Some(at) = r.req.exact {
        assert_eq!(a.va_start, at);
    }
    areas.push(a);
    assert_holds(space, areas);
    a
}

/// Frees every area (with the heap working) and checks the space is empty.
fn free_all(space: &mut Space, areas: &mut Vec<VmapArea>) {
    for a in areas.drain(..) {
        assert_eq!(space.free(a.va_start), Ok(a));
    }
    assert!(space.is_empty());
    assert_eq!(space.nodes_in_use(), 0);
    assert_holds(space, &[]);
}

/// Lowest-fit pages from an empty space: the node table's first block and
/// the first leaf split are refused cleanly, each within a few requests.
#[test]
fn plain_alloc_refused_at_a_leaf_split() {
    let mut space = new_space();
    let mut areas = Vec::new();
    // The empty table: `VecSource` gets null from the heap and reports
    // `OutOfFrames`, which the space turns into `NodePoolExhausted`.
    assert_eq!(
        heap_failing(|| space.alloc_request(&page())),
        Err(VmapError::NodePoolExhausted)
    );
    assert_eq!(culprit(), Culprit::NodeTable);
    assert_holds(&space, &areas);
    let r = alloc_until_refused(&mut space, &mut areas, Culprit::BlockTree, 100, |_| page());
    // A leaf holds 16 records, the end-of-space sentinel one of them.
    assert!(r.tries > 1, "refused with room in the only leaf");
    let a = retry(&mut space, &mut areas, &r);
    assert_eq!(a.va_start, va(START + (areas.len() as u64 - 1) * PAGE));
    // The tree grew: more pages go in, all lowest fit.
    for _ in 0..100 {
        areas.push(space.alloc_request(&page()).unwrap());
    }
    for (i, a) in areas.iter().enumerate() {
        assert_eq!(a.va_start, va(START + i as u64 * PAGE));
    }
    assert_holds(&space, &areas);
    free_all(&mut space, &mut areas);
}

/// The node table growing: refused cleanly as well (tree refusals met on
/// the way are retried).
#[test]
fn node_table_growth_refused_cleanly() {
    let mut space = new_space();
    let mut areas = vec![space.alloc_request(&page()).unwrap()];
    let r = alloc_until_refused(&mut space, &mut areas, Culprit::NodeTable, 1_000, |_| {
        page()
    });
    retry(&mut space, &mut areas, &r);
    // Grown again, under a deep tree.
    while areas.len() < DEEP {
        areas.push(space.alloc_request(&page()).unwrap());
    }
    let r = alloc_until_refused(&mut space, &mut areas, Culprit::NodeTable, 2 * DEEP, |_| {
        page()
    });
    retry(&mut space, &mut areas, &r);
    free_all(&mut space, &mut areas);
}

/// Lowest-fit pages appended to a tree of height 2 or more, whose splits
/// reach the inner nodes: the first split the vectors have no room for
/// is refused cleanly. They grow by doubling, so one runs out within
/// about as many allocations as the tree holds.
#[test]
fn plain_alloc_refused_in_a_deep_tree() {
    let (mut space, mut areas) = filled(DEEP);
    let r = alloc_until_refused(&mut space, &mut areas, Culprit::BlockTree, 2 * DEEP, |_| {
        page()
    });
    let a = retry(&mut space, &mut areas, &r);
    assert_eq!(a.va_start, va(START + (areas.len() as u64 - 1) * PAGE));
    free_all(&mut space, &mut areas);
}

/// Exact pages into the holes of every other page: the splits are of
/// leaves in the middle of the tree (not appends), first of a small tree,
/// then of a deep one.
#[test]
fn exact_alloc_refused_at_a_split() {
    for n in [40, DEEP] {
        let mut space = new_space();
        let mut areas: Vec<_> = (0..n as u64)
            .map(|p| space.alloc_request(&exact_page(2 * p)).unwrap())
            .collect();
        let holes = n as u64;
        let r = alloc_until_refused(&mut space, &mut areas, Culprit::BlockTree, n, |i| {
            exact_page(2 * (i as u64 % holes) + 1)
        });
        if n == 40 {
            assert!(r.tries < 40, "{} tries", r.tries);
        }
        retry(&mut space, &mut areas, &r);
        // An exact request for a page that is taken still says so.
        let taken = exact_page(0);
        assert!(matches!(
            heap_failing(|| space.alloc_request(&taken)),
            Err(VmapError::NoSpace { .. })
        ));
        assert_holds(&space, &areas);
        free_all(&mut space, &mut areas);
    }
}

/// Frees never ask the heap for anything: with it failing, freeing every
/// other area (leaves thin out), then the lower half of the rest in one
/// purge batch (`find_unlink_batch`: leaves and inner nodes empty and are
/// unlinked), then the rest (the root shrinks back to one leaf) all
/// succeed. A refill in between, with the heap still failing, reuses the
/// unlinked nodes or is refused cleanly.
#[test]
fn frees_never_fail() {
    let (mut space, mut areas) = filled(DEEP);
    let before = refused();
    let odd: Vec<_> = areas.iter().copied().skip(1).step_by(2).collect();
    let kept: Vec<_> = areas.iter().copied().step_by(2).collect();
    let (low, high) = kept.split_at(kept.len() / 2);
    for a in &odd {
        assert_eq!(heap_failing(|| space.free(a.va_start)), Ok(*a));
    }
    assert_eq!(refused(), before, "a free asked the heap");
    space.check_invariants().unwrap();
    // The purge: ascending, with a double free in the middle of the run
    // (refused, the batch goes on). `done` only writes into room made
    // beforehand.
    let mut batch: Vec<_> = low.iter().map(|a| a.va_start).collect();
    batch.insert(batch.len() / 2, odd[0].va_start);
    let mut done = Vec::with_capacity(batch.len());
    heap_failing(|| {
        space.find_unlink_batch(batch.iter().copied(), |addr, r| done.push((addr, r)));
    });
    assert_eq!(refused(), before, "a purge asked the heap");
    assert_eq!(done.len(), batch.len());
    for ((addr, r), want) in done.iter().zip(&batch) {
        assert_eq!(addr, want);
        match low.iter().find(|a| a.va_start == *addr) {
            Some(a) => assert_eq!(*r, Ok(*a)),
            None => assert_eq!(
                *r,
                Err(VmapError::NotFound {
                    addr: addr.as_u64()
                })
            ),
        }
    }
    for a in odd.iter().chain(low) {
        assert_eq!(space.find(a.va_start), None);
    }
    areas = high.to_vec();
    assert_holds(&space, &areas);

    // Refill the freed pages (lowest fit: the lowest holes first).
    let r = alloc_until_refused(&mut space, &mut areas, Culprit::BlockTree, 2 * DEEP, |_| {
        page()
    });
    retry(&mut space, &mut areas, &r);

    let before = refused();
    for a in &areas {
        assert_eq!(heap_failing(|| space.free(a.va_start)), Ok(*a));
    }
    assert_eq!(refused(), before, "a free asked the heap");
    areas.clear();
    assert!(space.is_empty());
    assert_holds(&space, &areas);
}

/// Even pages `0, 2, …, 2 * (n - 1)` with the heap working, then the odd
/// holes in order with it failing, up to the first refused split: the
/// tree's vectors are full and so is the leaf of the refused hole.
fn full_tree(n: u64) -> (Space, Vec<VmapArea>, Refusal) {
    let mut space = new_space();
    let mut areas: Vec<_> = (0..n)
        .map(|p| space.alloc_request(&exact_page(2 * p)).unwrap())
        .collect();
    let r = alloc_until_refused(
        &mut space,
        &mut areas,
        Culprit::BlockTree,
        n as usize,
        |i| exact_page(2 * i as u64 + 1),
    );
    (space, areas, r)
}

/// `resize` unlinks the area, then takes the new range, or the old one
/// back: with the heap failing, taking the old one back may need the split
/// that was just refused (the area was last in its leaf and the next leaf
/// is full), and the area is lost (a `debug_assert!` panics in debug
/// builds) although `resize` says nothing changed. Tried on each area
/// below the refused hole (all holes there taken: growing is refused).
#[test]
#[cfg_attr(miri, ignore = "no unsafe code of its own, and minutes under Miri")]
fn resize_keeps_the_area_when_the_heap_fails() {
    const N: u64 = 40;
    let (_, areas, refusal) = full_tree(N);
    let hole = refusal.req.exact.unwrap();
    let mut below: Vec<_> = areas
        .iter()
        .copied()
        .filter(|a| a.va_start < hole)
        .collect();
    below.sort_by_key(|a| std::cmp::Reverse(a.va_start));
    let mut refused_resizes = 0;
    for x in below.into_iter().take(32) {
        // The same operations give the same tree.
        let (mut space, mut areas, _) = full_tree(N);
        let before = refused();
        let r = catch_unwind(AssertUnwindSafe(|| {
            heap_failing(|| space.resize(x.va_start, 2 * PAGE))
        }));
        if refused() > before {
            refused_resizes += 1;
        }
        let Ok(r) = r else {
            panic!(
                "resize of {x:?} panicked with the heap failing; `find` says {:?} after it",
                space.find(x.va_start)
            );
        };
        match r {
            // The area just below the hole grows into it.
            Ok(g) => {
                assert_eq!((g.va_start, g.size()), (x.va_start, 2 * PAGE));
                let i = areas.iter().position(|a| *a == x).unwrap();
                areas[i] = g;
            }
            Err(e) => {
                assert!(
                    matches!(e, VmapError::NoSpace { .. } | VmapError::NodePoolExhausted),
                    "{x:?}: {e:?}"
                );
                assert_eq!(space.find(x.va_start), Some(x), "{x:?} lost by {e:?}");
            }
        }
        assert_holds(&space, &areas);
    }
    assert!(refused_resizes > 0, "no resize needed the heap");
}

/// A state of `ops` pseudo-random allocations (lowest fit or exact) and
/// frees from `seed`, with the heap working: leaves thinned out, some
/// unlinked, their nodes on the tree's free lists.
fn churned(seed: u64, ops: usize) -> (Space, Vec<VmapArea>) {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x >> 33
    };
    let mut space = new_space();
    let mut areas: Vec<VmapArea> = Vec::new();
    for _ in 0..ops {
        let r = next();
        if areas.is_empty() || r % 100 < 55 {
            let q = if r % 3 == 0 {
                exact_page(next() % 400)
            } else {
                page()
            };
            if let Ok(a) = space.alloc_request(&q) {
                areas.push(a);
            }
        } else {
            let a = areas.swap_remove(next() as usize % areas.len());
            assert_eq!(space.free(a.va_start), Ok(a));
        }
    }
    (space, areas)
}

/// As [`resize_keeps_the_area_when_the_heap_fails`], growing each area of
/// many states after frees by a page: reserving for the split before the
/// unlink is not enough if the unlink's own free-list entry then makes the
/// split's reservation ask for more (seed 179 with the tree of this
/// writing).
#[test]
#[cfg_attr(miri, ignore = "no unsafe code of its own, and minutes under Miri")]
fn resize_keeps_the_area_after_frees() {
    let seeds = 200;
    let mut refused_resizes = 0;
    for seed in 0..seeds {
        let (_, areas) = churned(seed, 200);
        for x in areas {
            let (mut space, mut areas) = churned(seed, 200);
            let before = refused();
            let r = catch_unwind(AssertUnwindSafe(|| {
                heap_failing(|| space.resize(x.va_start, x.size() + PAGE))
            }));
            if refused() > before {
                refused_resizes += 1;
            }
            let Ok(r) = r else {
                panic!(
                    "seed {seed}: resize of {x:?} panicked with the heap failing; \
                     `find` says {:?} after it",
                    space.find(x.va_start)
                );
            };
            match r {
                Ok(g) => {
                    assert_eq!((g.va_start, g.size()), (x.va_start, x.size() + PAGE));
                    let i = areas.iter().position(|a| *a == x).unwrap();
                    areas[i] = g;
                }
                Err(e) => {
                    assert_eq!(
                        space.find(x.va_start),
                        Some(x),
                        "seed {seed}: lost by {e:?}"
                    );
                }
            }
            assert_holds(&space, &areas);
        }
    }
    assert!(refused_resizes > 0, "no resize needed the heap");
}

/// Splits after a purge take the tree's freed nodes first: refilling part
/// of what the purge emptied asks the heap for nothing, though its vectors
/// were full before the purge.
#[test]
fn splits_after_a_purge_reuse_its_nodes() {
    let (mut space, mut areas) = filled(DEEP);
    // Up to the split the vectors have no room for.
    let r = alloc_until_refused(&mut space, &mut areas, Culprit::BlockTree, 2 * DEEP, |_| {
        page()
    });
    // The lowest three quarters go: whole leaves and inner nodes empty.
    areas.sort_by_key(|a| a.va_start);
    let low: Vec<_> = areas.drain(..areas.len() * 3 / 4).collect();
    let before = refused();
    heap_failing(|| {
        space.find_unlink_batch(low.iter().map(|a| a.va_start), |_, r| assert!(r.is_ok()));
    });
    assert_holds(&space, &areas);
    // The refused request and a tenth of the purged pages, lowest fit.
    for (i, want) in low.iter().enumerate().take(low.len() / 10 + 1) {
        let got = heap_failing(|| space.alloc_request(&r.req));
        assert_eq!(got.map(|a| a.va_start), Ok(want.va_start), "refill {i}");
        areas.push(got.unwrap());
    }
    assert_eq!(refused(), before, "a split after the purge asked the heap");
    assert_holds(&space, &areas);
    free_all(&mut space, &mut areas);
}
