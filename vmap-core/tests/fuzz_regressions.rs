//! Inputs the `cargo fuzz` targets (`vmap-core/fuzz`) found, as plain tests
//! (every build, with debug assertions: overflow checks on).

use vmap_core::{
    AllocRequest, Augmented, BTree, FreeAreaSearch, FreeVmapCache, Linear, VecSource, VirtAddr,
    VmapSpace,
};

const P: u64 = 0x1000;
const BASE: u64 = 0x4000_0000;

fn space<F: FreeAreaSearch>(pages: u64) -> VmapSpace<F, VecSource> {
    VmapSpace::new(
        VirtAddr::new(BASE),
        VirtAddr::new(BASE + pages * P),
        P,
        VecSource::new(),
    )
    .unwrap()
}

/// A search in a full space (no free block left) with `vstart` above the
/// space's start: `BTree`'s search took the rank of `vstart` in the empty
/// root minus one (a subtraction overflow, a panic in debug builds). Every
/// policy must answer "no room" alike.
fn full_space_search<F: FreeAreaSearch>() -> Option<(u64, u64)> {
    let mut s = space::<F>(4);
    let whole = AllocRequest::new(4 * P, P, VirtAddr::new(BASE), VirtAddr::new(BASE + 4 * P));
    s.alloc_request(&whole).unwrap();
    let above = AllocRequest::new(P, P, VirtAddr::new(BASE + P), VirtAddr::new(BASE + 4 * P));
    s.alloc_request(&above)
        .ok()
        .map(|a| (a.va_start.as_u64(), a.va_end.as_u64()))
}

#[test]
fn search_in_a_full_space_finds_nothing() {
    assert_eq!(full_space_search::<Linear>(), None);
    assert_eq!(full_space_search::<FreeVmapCache>(), None);
    assert_eq!(full_space_search::<Augmented>(), None);
    assert_eq!(full_space_search::<BTree>(), None);
}
