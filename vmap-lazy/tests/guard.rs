//! Guard pages: one unmapped page after every vmalloc / vmap area unless
//! `NO_GUARD`, one before as well for stacks; a touch of one is a typed
//! `GuardPageHit`, never a write elsewhere; the guard builds no table.

mod common;

use arch_api::{FrameSource, MapFlags, SoftTlb, VirtAddr};
use common::*;
use vmap_lazy::{
    AreaState, LazyMaxPages, OneSpace, StaleTlbChecker, VmFlags, Vmalloc, VmallocError, VmallocMem,
};

type V<'m> = Vmalloc<'m, K<'m>, LazyMaxPages, OneSpace<K<'m>>>;

fn hit(addr: VirtAddr, area: VirtAddr) -> Result<(), VmallocError> {
    Err(VmallocError::GuardPageHit {
        addr: addr.as_u64(),
        area: area.as_u64(),
    })
}

fn below(a: VirtAddr, pages: u64) -> VirtAddr {
    VirtAddr::new(a.as_u64() - pages * PAGE)
}

#[test]
fn an_overrun_hits_the_guard_page_and_writes_nothing() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let a = v.vmalloc(2 * PAGE).unwrap();
    let b = v.vmalloc(PAGE).unwrap();
    assert_eq!(b, va(a, 3), "one page of address space between them");
    v.write_byte(va(a, 1), 7).unwrap();
    v.write_byte(b, 3).unwrap();
    assert_eq!(v.write_byte(va(a, 2), 9), hit(va(a, 2), a));
    assert_eq!(v.read_byte(va(a, 2)).map(|_| ()), hit(va(a, 2), a));
    assert!(v.translate(va(a, 2)).is_none(), "the guard is not mapped");
    assert_eq!(v.read_byte(b).unwrap(), 3, "b untouched");
    let info = v.areas()[0];
    assert_eq!(info.reserved(), (a, va(a, 3)));
    assert!(info.is_guard(va(a, 2)) && !info.is_guard(va(a, 1)));
    // A vmap area has its guard too.
    let frames: Vec<_> = (0..2).map(|_| arena.alloc(PAGE, PAGE).unwrap()).collect();
    let m = v.vmap(&frames, MapFlags::WRITE | MapFlags::GLOBAL).unwrap();
    assert_eq!(v.write_byte(va(m, 2), 1), hit(va(m, 2), m));
    // Once freed the area has no guard: a plain miss.
    v.vfree(a).unwrap();
    assert_eq!(
        v.write_byte(va(a, 2), 1),
        Err(VmallocError::NotFound {
            addr: va(a, 2).as_u64()
        })
    );
    v.vunmap(m).unwrap();
    v.vfree(b).unwrap();
    v.purge_vmap_area_lazy();
    for f in frames {
        arena.free(f, PAGE).unwrap();
    }
    v.check_consistency().unwrap();
    assert_eq!(mem.bytes_out(), v.pagetable_bytes(), "nothing leaked");
}

#[test]
fn no_guard_areas_abut_and_an_overrun_lands_in_the_next_one() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let a = v
        .vmalloc_with(PAGE, PAGE, VmFlags::NO_GUARD, "early")
        .unwrap();
    let b = v.vmalloc(PAGE).unwrap();
    assert_eq!(b, va(a, 1), "no guard page in between");
    // Why NO_GUARD is dangerous: the overrun silently writes `b`.
    v.write_byte(va(a, 1), 42).unwrap();
    assert_eq!(v.read_byte(b).unwrap(), 42);
    assert_eq!(v.areas()[0].flags, VmFlags::NO_GUARD);
    v.vfree(a).unwrap();
    v.vfree(b).unwrap();
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
}

#[test]
fn a_stack_faults_on_underflow_and_overflow() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let s = v.vmalloc_stack(2 * PAGE).unwrap();
    assert_eq!(s, va(VirtAddr::new(VSTART), 1), "a guard page below it");
    v.write_byte(s, 1).unwrap();
    v.write_byte(VirtAddr::new(va(s, 2).as_u64() - 1), 1)
        .unwrap();
    let under = VirtAddr::new(s.as_u64() - 1);
    assert_eq!(v.write_byte(under, 1), hit(under, s), "underflow");
    assert_eq!(v.write_byte(va(s, 2), 1), hit(va(s, 2), s), "overflow");
    let info = v.areas()[0];
    assert_eq!(info.reserved(), (below(s, 1), va(s, 3)));
    assert_eq!(info.flags, VmFlags::GUARD_BEFORE);
    // Aligned stacks: the stack is aligned, its guard lies below.
    let t = v
        .vmalloc_with(PAGE, 4 * PAGE, VmFlags::GUARD_BEFORE, "stack")
        .unwrap();
    assert_eq!(t.as_u64() % (4 * PAGE), 0);
    assert_eq!(v.read_byte(below(t, 1)).map(|_| ()), hit(below(t, 1), t));
    v.check_consistency().unwrap();
    v.vfree(s).unwrap();
    v.vfree(t).unwrap();
    assert!(v.areas().iter().all(|a| a.state == AreaState::Lazy));
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
    assert!(v.areas().is_empty());
    // The whole range, guards included, is free again.
    let again = v.vmalloc_stack(2 * PAGE).unwrap();
    assert_eq!(again, s);
    v.vfree(again).unwrap();
    v.purge_vmap_area_lazy();
    assert_eq!(mem.bytes_out(), v.pagetable_bytes(), "nothing leaked");
}

#[test]
fn bad_requests_change_nothing() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(4), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let out = mem.bytes_out();
    assert_eq!(
        v.vmalloc_with(0, PAGE, VmFlags::GUARD_BEFORE, "t"),
        Err(VmallocError::ZeroSize)
    );
    assert!(matches!(
        v.vmalloc_with(u64::MAX, PAGE, VmFlags::empty(), "t"),
        Err(VmallocError::Overflow { .. })
    ));
    // 4 pages: a 4-page area fits without a guard only.
    assert!(matches!(
        v.vmalloc(4 * PAGE),
        Err(VmallocError::NoVirtualSpace(_))
    ));
    assert!(v.areas().is_empty());
    assert_eq!(mem.bytes_out(), out);
    let a = v
        .vmalloc_with(4 * PAGE, PAGE, VmFlags::NO_GUARD, "t")
        .unwrap();
    v.vfree(a).unwrap();
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
}

/// Story 1's loop with and without guard pages: the guards take address
/// space, not page tables, and the checker finds no stale range either way.
#[test]
#[cfg_attr(
    miri,
    ignore = "2 x 3000 loop iterations: too slow under miri; covered natively"
)]
fn guards_cost_address_space_not_page_tables() {
    let run = |flags: VmFlags| {
        let arena = arena(8 << 20);
        let mem = VmallocMem::new(&arena);
        let tlb = SoftTlb::new(CPUS, PAGE, arch_api::CostModel::FREE);
        let checker = StaleTlbChecker::new(&tlb);
        let mut v: V = Vmalloc::new(&mem, space(1 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
        v.set_alloc_check(&checker);
        let mut top = 0;
        for i in 0..3000u64 {
            let a = v.vmalloc_with(4 * PAGE, PAGE, flags, "loop").unwrap();
            for p in 0..4 {
                v.write_byte(va(a, p), i as u8).unwrap();
                tlb.touch((i + p) as usize % CPUS, va(a, p));
            }
            top = top.max(a.as_u64() + 4 * PAGE);
            v.vfree(a).unwrap();
        }
        v.purge_vmap_area_lazy();
        assert_eq!(checker.violations(), 0, "{:?}", checker.first_violation());
        assert!(checker.checks() >= 3000);
        (v.pagetable_bytes(), top - VSTART)
    };
    let (pt_guard, span_guard) = run(VmFlags::empty());
    let (pt_none, span_none) = run(VmFlags::NO_GUARD);
    assert!(span_guard > span_none, "guards take address space");
    // No entry and no table for a guard: the only tables guards add are the
    // last-level ones the longer span between purges reaches (one per 512
    // pages of span), not one per guard.
    let extra_tables = (span_guard - span_none).div_ceil(512 * PAGE) + 1;
    println!(
        "page tables: guard {pt_guard} B over {span_guard} B, none {pt_none} B over {span_none} B"
    );
    assert!(
        pt_guard <= pt_none + extra_tables * PAGE,
        "guard {pt_guard} vs none {pt_none} (+{extra_tables} tables allowed)"
    );
}
