//! vmalloc / vfree / vmap / vunmap / purge: behaviour, errors and unwinding.

mod common;

use arch_api::{FrameSource, HostedCpus, MapFlags, VirtAddr};
use common::*;
use vmap_core::{Augmented, Linear};
use vmap_lazy::{
    AreaKind, AreaState, Eager, LazyMaxPages, LookupCost, OneSpace, Vmalloc, VmallocError,
    VmallocMem,
};

type V<'m, P = LazyMaxPages, F = Augmented> = Vmalloc<'m, K<'m>, P, OneSpace<K<'m>, F>>;

#[test]
fn vmalloc_maps_writable_memory_and_vfree_is_lazy_until_purge() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let base = mem.bytes_out();
    let a = v.vmalloc(3 * PAGE + 1).unwrap();
    assert_eq!(a.as_u64(), VSTART, "lowest address first");
    for p in 0..4 {
        v.write_byte(va(a, p), p as u8 + 7).unwrap();
        tlb.touch(p as usize % CPUS, va(a, p));
    }
    for p in 0..4 {
        assert_eq!(v.read_byte(va(a, p)).unwrap(), p as u8 + 7);
    }
    assert_eq!(
        v.read_byte(va(a, 4)),
        Err(VmallocError::GuardPageHit {
            addr: va(a, 4).as_u64(),
            area: a.as_u64()
        }),
        "the page beyond the area is its guard"
    );
    v.check_consistency().unwrap();
    let before = tlb.stats();
    v.vfree(a).unwrap();
    assert_eq!(tlb.stats(), before, "vfree does not flush");
    assert!(v.translate(a).is_none(), "entries are cleared at once");
    assert_eq!(v.vmap_lazy_nr(), 4);
    assert!(
        tlb.may_hold(a, va(a, 4)),
        "CPUs still hold the translations"
    );
    assert_eq!(v.areas()[0].state, AreaState::Lazy);
    v.check_consistency().unwrap();
    // The range is still reserved: the next area goes above it (and its
    // guard page).
    let b = v.vmalloc(PAGE).unwrap();
    assert_eq!(b, va(a, 5));
    let r = v.purge_vmap_area_lazy();
    assert_eq!(
        (r.areas, r.pages, r.start, r.end),
        (1, 4, a.as_u64(), va(a, 4).as_u64())
    );
    assert_eq!(
        tlb.stats().flush_events,
        before.flush_events + 1,
        "one flush"
    );
    assert!(!tlb.may_hold(a, va(a, 4)));
    assert_eq!(v.vmap_lazy_nr(), 0);
    let c = v.vmalloc(PAGE).unwrap();
    assert_eq!(c, a, "the purged range is reused");
    v.vfree(b).unwrap();
    v.vfree(c).unwrap();
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
    assert!(v.areas().is_empty());
    assert!(base > 0);
    assert_eq!(
        mem.bytes_out(),
        v.pagetable_bytes(),
        "frames all returned; tables kept"
    );
    assert_eq!(v.stats().lazy_underflows, 0);
}

#[test]
fn one_purge_flushes_the_union_of_all_lazy_areas() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 16), tlb.on(1), cpus(), LazyMaxPages).unwrap();
    let areas: Vec<_> = (0..5).map(|_| v.vmalloc(2 * PAGE).unwrap()).collect();
    for (i, a) in areas.iter().enumerate() {
        tlb.touch(i % CPUS, *a);
    }
    for a in [areas[3], areas[0], areas[4]] {
        v.vfree(a).unwrap();
    }
    let r = v.purge_vmap_area_lazy();
    assert_eq!(r.areas, 3);
    assert_eq!(
        (r.start, r.end),
        (areas[0].as_u64(), va(areas[4], 2).as_u64())
    );
    let s = tlb.stats();
    assert_eq!(
        (s.flush_events, s.pages_flushed, s.ipis),
        // 5 areas of 2 pages and a guard page each: the union from the
        // first to the end of the fifth spans 14 pages.
        (1, 14, (CPUS - 1) as u64)
    );
    assert_eq!(v.purge_vmap_area_lazy().areas, 0, "nothing left: no flush");
    assert_eq!(tlb.stats().flush_events, 1);
    v.check_consistency().unwrap();
}

#[test]
fn errors_leave_everything_unchanged() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    assert_eq!(v.vfree(VirtAddr::new(0)), Ok(()), "vfree(NULL) is a no-op");
    assert_eq!(v.vmalloc(0), Err(VmallocError::ZeroSize));
    assert_eq!(
        v.vmalloc(u64::MAX),
        Err(VmallocError::Overflow { size: u64::MAX })
    );
    assert!(matches!(
        v.vmalloc(1 << 40),
        Err(VmallocError::NoVirtualSpace(_))
    ));
    let a = v.vmalloc(2 * PAGE).unwrap();
    let inside = va(a, 1);
    assert_eq!(
        v.vfree(inside),
        Err(VmallocError::NotFound {
            addr: inside.as_u64()
        })
    );
    assert_eq!(
        v.vunmap(a),
        Err(VmallocError::WrongKind {
            addr: a.as_u64(),
            kind: "vmalloc"
        })
    );
    assert_eq!(v.areas()[0].state, AreaState::Live, "state unchanged");
    assert!(v.translate(a).is_some());
    v.vfree(a).unwrap();
    assert_eq!(
        v.vfree(a),
        Err(VmallocError::NotFound { addr: a.as_u64() }),
        "double free while lazy"
    );
    assert_eq!(v.vmap_lazy_nr(), 2, "counted once");
    v.purge_vmap_area_lazy();
    assert_eq!(v.vfree(a), Err(VmallocError::NotFound { addr: a.as_u64() }));
    assert_eq!(v.stats().frees, 1);
    v.check_consistency().unwrap();
}

#[test]
fn frame_exhaustion_at_every_step_unwinds_completely() {
    let arena = arena(4 << 20);
    // Tables for the first area's path (3 below the root) + 4 frames = 7
    // allocations; fail at each of them in turn.
    for budget in 0..8u64 {
        let failing = Failing::new(&arena, u64::MAX);
        let mem = VmallocMem::new(&failing);
        let tlb = tlb();
        let v: Vmalloc<'_, K<'_, Failing<'_>>> =
            Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
        let base = arena.frames_in_use();
        let pt0 = v.pagetable_bytes();
        failing.set(budget);
        match v.vmalloc(4 * PAGE) {
            Ok(a) => {
                assert_eq!(budget, 7, "7 allocations suffice");
                v.vfree(a).unwrap();
                v.purge_vmap_area_lazy();
                let tables = (v.pagetable_bytes() - pt0) / PAGE;
                assert!(tables >= 3);
                assert_eq!(
                    arena.frames_in_use(),
                    base + tables,
                    "only the kept tables remain"
                );
            }
            Err(e) => {
                assert!(
                    matches!(e, VmallocError::OutOfFrames(_) | VmallocError::Map(_)),
                    "{e:?}"
                );
                assert!(v.areas().is_empty(), "no area left behind");
                assert!(
                    v.translate(VirtAddr::new(VSTART)).is_none(),
                    "nothing mapped"
                );
                let tables = (v.pagetable_bytes() - pt0) / PAGE;
                assert_eq!(
                    arena.frames_in_use(),
                    base + tables,
                    "no frame leaked (budget {budget})"
                );
                assert_eq!(tables, 0, "a failed map allocates no table");
                v.check_consistency().unwrap();
                assert_eq!(v.stats().retries, 1, "retried once after a purge");
            }
        }
    }
}

#[test]
fn no_space_purges_and_retries_once() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    // Room for two areas of 4 pages and their guard pages only.
    let v: V = Vmalloc::new(&mem, space(10), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let a = v.vmalloc(4 * PAGE).unwrap();
    let b = v.vmalloc(4 * PAGE).unwrap();
    v.vfree(a).unwrap();
    assert_eq!(v.vmap_lazy_nr(), 4);
    let c = v.vmalloc(4 * PAGE).unwrap();
    assert_eq!(c, a, "the lazy range was purged and reused");
    assert_eq!(v.stats().retries, 1);
    assert_eq!(v.stats().purges, 1);
    assert!(matches!(
        v.vmalloc(PAGE),
        Err(VmallocError::NoVirtualSpace(_))
    ));
    assert_eq!(v.stats().retries, 2);
    v.vfree(b).unwrap();
    v.vfree(c).unwrap();
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
}

#[test]
fn vmap_maps_caller_frames_and_vunmap_leaves_them_to_the_caller() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let frames: Vec<_> = (0..3).map(|_| arena.alloc(PAGE, PAGE).unwrap()).collect();
    let in_use = arena.frames_in_use();
    let tables = v.pagetable_bytes();
    let a = v.vmap(&frames, MapFlags::WRITE | MapFlags::GLOBAL).unwrap();
    assert_eq!(v.translate(va(a, 2)).unwrap().frame, frames[2]);
    v.write_byte(va(a, 1), 0x5a).unwrap();
    assert_eq!(
        unsafe_free_read(&arena, frames[1]),
        0x5a,
        "the write reached the caller's frame"
    );
    assert_eq!(v.areas()[0].kind, AreaKind::Vmap);
    assert_eq!(
        v.vfree(a),
        Err(VmallocError::WrongKind {
            addr: a.as_u64(),
            kind: "vmap"
        })
    );
    v.vunmap(a).unwrap();
    v.purge_vmap_area_lazy();
    let new_tables = (v.pagetable_bytes() - tables) / PAGE;
    assert_eq!(
        arena.frames_in_use(),
        in_use + new_tables,
        "vunmap freed none of the caller's frames"
    );
    for f in frames {
        arena.free(f, PAGE).unwrap();
    }
    assert!(matches!(
        v.vmap(&[], MapFlags::WRITE),
        Err(VmallocError::ZeroSize)
    ));
    let odd = arch_api::PhysAddr::new(arch_api::PhysArena::BASE.as_u64() + 12);
    assert_eq!(
        v.vmap(&[odd], MapFlags::WRITE),
        Err(VmallocError::UnalignedFrame {
            frame: odd.as_u64()
        })
    );
    v.check_consistency().unwrap();
}

fn unsafe_free_read(arena: &arch_api::PhysArena, f: arch_api::PhysAddr) -> u8 {
    use arch_api::PhysMap;
    let p = arena.phys_to_ptr(f);
    // SAFETY: `f` is a frame of the arena, allocated by this test and still
    // held; nothing writes it concurrently.
    unsafe { p.read_volatile() }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of allocations: too slow under miri; covered natively"
)]
fn eager_flushes_on_every_vfree_and_lazy_waits_for_the_threshold() {
    let arena = arena(8 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V<Eager> = Vmalloc::new(&mem, space(1 << 20), tlb.on(0), cpus(), Eager).unwrap();
    for _ in 0..10 {
        let a = v.vmalloc(PAGE).unwrap();
        v.vfree(a).unwrap();
    }
    assert_eq!(tlb.stats().flush_events, 10);
    assert_eq!(v.stats().purges, 10);
    assert_eq!(v.vmap_lazy_nr(), 0);

    let tlb = common::tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    // 4 CPUs: fls(4) = 3, so 3 x 8192 pages before a purge.
    let max = vmap_lazy::purge::lazy_max_pages(CPUS as u32, PAGE);
    assert_eq!(max, 3 * 8192);
    for _ in 0..max / 8 {
        let a = v.vmalloc(8 * PAGE).unwrap();
        v.vfree(a).unwrap();
    }
    assert_eq!(v.vmap_lazy_nr(), max);
    assert_eq!(tlb.stats().flush_events, 0);
    let a = v.vmalloc(8 * PAGE).unwrap();
    v.vfree(a).unwrap();
    assert_eq!(v.vmap_lazy_nr(), 0);
    assert_eq!(
        (tlb.stats().flush_events, v.stats().areas_purged),
        (1, max / 8 + 1)
    );
    v.check_consistency().unwrap();
}

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of allocations: too slow under miri; covered natively"
)]
fn lookup_cost_purges_when_a_search_gets_expensive() {
    let arena = arena(8 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V<LookupCost, Linear> = Vmalloc::new(
        &mem,
        space(1 << 20),
        tlb.on(0),
        cpus(),
        LookupCost { max_nodes: 20 },
    )
    .unwrap();
    for _ in 0..200 {
        let a = v.vmalloc(PAGE).unwrap();
        v.vfree(a).unwrap();
    }
    let s = v.stats();
    assert!(s.purges >= 5, "{s:?}");
    assert!(s.nodes_visited_max <= 22, "{s:?}");
    v.check_consistency().unwrap();
}

#[test]
fn vmallocinfo_lists_every_area_with_its_state() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let a = v.vmalloc_caller(2 * PAGE, PAGE, "module_alloc").unwrap();
    let b = v.vmalloc(PAGE).unwrap();
    v.vfree(b).unwrap();
    let text = vmap_lazy::vmallocinfo(&v.areas());
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "0xffffc90000000000-0xffffc90000003000   12288 module_alloc pages=2 vmalloc guard=after",
            "0xffffc90000003000-0xffffc90000005000    8192 unpurged vm_area",
        ]
    );
    v.vfree(a).unwrap();
    v.purge_vmap_area_lazy();
    assert_eq!(vmap_lazy::vmallocinfo(&v.areas()), "");
}

#[test]
fn vm_map_ram_carves_per_cpu_blocks_and_reuses_flushed_space() {
    use vmap_lazy::{VMAP_BBMAP_BITS, VMAP_MAX_ALLOC};
    let arena = arena(8 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let checker = vmap_lazy::StaleTlbChecker::new(&tlb);
    let mut v: V = Vmalloc::new(&mem, space(1 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    v.set_alloc_check(&checker);
    let frames: Vec<_> = (0..VMAP_MAX_ALLOC)
        .map(|_| arena.alloc(PAGE, PAGE).unwrap())
        .collect();
    let flags = MapFlags::WRITE | MapFlags::GLOBAL;
    let a = on_cpu(0, &v).vm_map_ram(&frames[..4], flags).unwrap();
    let b = on_cpu(0, &v).vm_map_ram(&frames[..2], flags).unwrap();
    assert_eq!(b, va(a, 4), "carved from the same block");
    let c = on_cpu(1, &v).vm_map_ram(&frames[..1], flags).unwrap();
    let blk = VMAP_BBMAP_BITS * PAGE;
    assert_ne!(
        c.as_u64() & !(blk - 1),
        a.as_u64() & !(blk - 1),
        "CPU 1 has its own block"
    );
    assert_eq!(v.translate(va(b, 1)).unwrap().frame, frames[1]);
    let blocks = v
        .areas()
        .iter()
        .filter(|i| i.kind == AreaKind::VmapBlock)
        .count();
    assert_eq!(blocks, 2);
    for p in 0..4 {
        tlb.touch(2, va(a, p));
    }
    // Errors change nothing.
    assert!(matches!(v.vm_unmap_ram(va(a, 1), 1), Ok(())));
    assert_eq!(
        v.vm_unmap_ram(va(a, 1), 1),
        Err(VmallocError::NotFound {
            addr: va(a, 1).as_u64()
        }),
        "already unmapped"
    );
    assert!(
        v.vm_unmap_ram(VirtAddr::new(VSTART + (1 << 30)), 1)
            .is_err()
    );
    v.vm_unmap_ram(a, 1).unwrap();
    v.vm_unmap_ram(va(a, 2), 2).unwrap();
    assert_eq!(v.vmap_block_dirty_pages(), 4);
    assert!(v.translate(a).is_none());
    assert!(tlb.may_hold(a, va(a, 4)), "no flush yet");
    // Fill CPU 0's block: when it runs out, one flush makes the dirty pages
    // reusable instead of a new block.
    let before = tlb.stats().flush_events;
    let mut got = Vec::new();
    for _ in 0..(VMAP_BBMAP_BITS - 6) / 2 {
        got.push(on_cpu(0, &v).vm_map_ram(&frames[..2], flags).unwrap());
    }
    assert_eq!(tlb.stats().flush_events, before, "room left: no flush");
    let reused = on_cpu(0, &v).vm_map_ram(&frames[..4], flags).unwrap();
    assert_eq!(reused, a, "the flushed pages are reused");
    assert_eq!(tlb.stats().flush_events, before + 1);
    assert_eq!(
        v.areas()
            .iter()
            .filter(|i| i.kind == AreaKind::VmapBlock)
            .count(),
        2
    );
    assert_eq!(checker.violations(), 0);
    // vm_unmap_aliases flushes dirty pages with the lazy areas in one flush.
    v.vm_unmap_ram(b, 2).unwrap();
    let x = v.vmalloc(PAGE).unwrap();
    v.vfree(x).unwrap();
    let f0 = tlb.stats().flush_events;
    let r = v.vm_unmap_aliases();
    assert_eq!(r.areas, 1);
    assert_eq!(tlb.stats().flush_events, f0 + 1);
    assert_eq!(v.vmap_block_dirty_pages(), 0);
    // Larger than VMAP_MAX_ALLOC: a plain vmap.
    let big: Vec<_> = (0..VMAP_MAX_ALLOC + 1)
        .map(|_| arena.alloc(PAGE, PAGE).unwrap())
        .collect();
    let g = on_cpu(0, &v).vm_map_ram(&big, flags).unwrap();
    assert_eq!(
        v.areas().iter().find(|i| i.start == g).unwrap().kind,
        AreaKind::Vmap
    );
    v.vm_unmap_ram(g, VMAP_MAX_ALLOC + 1).unwrap();
    // Unmap everything: blocks with reusable pages are kept.
    v.vm_unmap_ram(reused, 4).unwrap();
    for g in got {
        v.vm_unmap_ram(g, 2).unwrap();
    }
    v.vm_unmap_ram(c, 1).unwrap();
    v.check_consistency().unwrap();
    let count_blocks = || {
        v.areas()
            .iter()
            .filter(|i| i.kind == AreaKind::VmapBlock)
            .count()
    };
    assert_eq!(count_blocks(), 2);
    // A block whose every page was mapped and unmapped (all dirty, none
    // free) retires through the lazy list; the next purge releases it.
    let full: Vec<_> = (0..VMAP_BBMAP_BITS / VMAP_MAX_ALLOC)
        .map(|_| on_cpu(3, &v).vm_map_ram(&frames, flags).unwrap())
        .collect();
    assert_eq!(count_blocks(), 3);
    for g in full {
        v.vm_unmap_ram(g, VMAP_MAX_ALLOC).unwrap();
    }
    // (plus the 65-page vmap unmapped above)
    assert_eq!(
        v.vmap_lazy_nr(),
        VMAP_BBMAP_BITS + VMAP_MAX_ALLOC + 1,
        "the retired block is lazy"
    );
    v.check_consistency().unwrap();
    v.vm_unmap_aliases();
    assert_eq!(count_blocks(), 2);
    assert_eq!(v.vmap_lazy_nr(), 0);
    assert_eq!(checker.violations(), 0);
    v.check_consistency().unwrap();
    for f in frames.into_iter().chain(big) {
        arena.free(f, PAGE).unwrap();
    }
}

#[test]
fn page_table_roots_are_the_tables_a_vmalloc_is_linked_into() {
    use arch_api::{EntryKind, PageTableEntry, PageTableLayout, PhysMap};
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let (roots, n) = v.page_table_roots();
    assert_eq!(n, 1, "x86_64 has one root for both halves");
    assert_eq!(v.page_table_roots(), (roots, n), "roots do not move");
    let a = v.vmalloc(PAGE).unwrap();
    // The root's entry for `a` is now a table entry (the MMU would walk
    // from here), and it was empty before the vmalloc of a fresh space.
    let idx = L::index(a, 0);
    let root = arena.phys_to_ptr(roots[0]).cast::<u64>();
    // SAFETY: `roots[0]` is a live root table page of `v`'s walker inside
    // `arena`; `idx` < entries per table; the read is of a plain u64 that no
    // other thread writes now.
    let raw = unsafe { root.add(idx).read_volatile() };
    let entry = <L as PageTableLayout>::Entry::from_raw(raw);
    assert!(
        entry.is_present() && entry.kind(0) == EntryKind::Table,
        "root entry {raw:#x} for {a:?} is not a table"
    );
    v.vfree(a).unwrap();
    assert_eq!(v.page_table_roots(), (roots, n));
}

/// `v`, called from CPU `cpu` from now on.
fn on_cpu<T>(cpu: usize, v: &T) -> &T {
    HostedCpus::run_on(cpu);
    v
}
