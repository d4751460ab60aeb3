//! Huge mappings (`vmalloc_huge`, `VmFlags::HUGE`) against a model: which
//! leaf maps every page, where its frame lies, what goes back to the frame
//! source and in what units; the head and tail in base pages; the fallback
//! when the source has no contiguous run; errors that change nothing; the
//! stale-TLB checker on the huge zap path.

mod common;

use arch_api::{FrameError, FrameSource, PhysAddr, PhysArena, PhysMap, VirtAddr};
use common::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use vmap_core::GlobalVmap;
use vmap_lazy::{
    AreaInfo, InfoLine, LazyMaxPages, NodeLazy, OneSpace, StaleTlbChecker, VmFlags, Vmalloc,
    VmallocError, VmallocMem,
};
use zap_walker::WalkError;

/// x86_64's large leaf (a PMD).
const HUGE: u64 = 2 << 20;
/// Pages per large leaf.
const PER: u64 = HUGE / PAGE;

/// A frame source over an arena that can refuse large runs (after `runs`
/// of them) and every allocation (after `budget`), and logs every range
/// freed with its size.
struct Src<'a> {
    inner: &'a PhysArena,
    runs: AtomicU64,
    budget: AtomicU64,
    freed: Mutex<Vec<(PhysAddr, u64)>>,
}

impl<'a> Src<'a> {
    fn new(inner: &'a PhysArena) -> Self {
        Self {
            inner,
            runs: AtomicU64::new(u64::MAX),
            budget: AtomicU64::new(u64::MAX),
            freed: Mutex::new(Vec::new()),
        }
    }
    fn take(c: &AtomicU64) -> bool {
        c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
            .is_ok()
    }
    fn freed(&self) -> Vec<(PhysAddr, u64)> {
        std::mem::take(&mut *self.freed.lock().unwrap())
    }
}

impl FrameSource for Src<'_> {
    fn granule(&self) -> u64 {
        self.inner.granule()
    }
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        if !Self::take(&self.budget) || (size > PAGE && !Self::take(&self.runs)) {
            return Err(FrameError::OutOfFrames);
        }
        self.inner.alloc(size, align)
    }
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        self.freed.lock().unwrap().push((addr, size));
        self.inner.free(addr, size)
    }
}

// SAFETY: hands out the arena's frames only, reached through its direct map.
unsafe impl vmap_lazy::testing::HostedMem for Src<'_> {}

impl PhysMap for Src<'_> {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        self.inner.phys_to_ptr(addr)
    }
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.inner.ptr_to_phys(ptr)
    }
}

type KS<'a> = K<'a, Src<'a>>;
type V<'m> = Vmalloc<'m, KS<'m>, LazyMaxPages, OneSpace<KS<'m>>>;

/// A window of `[VSTART + skip, VSTART + skip + bytes)`.
fn window(skip: u64, bytes: u64) -> GlobalVmap<arch_api::sync::DefaultRawMutex, NodeLazy> {
    GlobalVmap::new(
        VirtAddr::new(VSTART + skip),
        VirtAddr::new(VSTART + skip + bytes),
        PAGE,
    )
    .unwrap()
}

fn info_at(v: &V<'_>, a: VirtAddr) -> AreaInfo {
    *v.areas().iter().find(|i| i.start == a).unwrap()
}

/// Frames vmalloc holds besides its page tables.
fn frames_out(mem: &VmallocMem<'_, Src<'_>>, v: &V<'_>) -> u64 {
    mem.bytes_out() - v.pagetable_bytes()
}

/// The model: page `p` of the area at `a` is mapped by a large leaf iff it
/// lies in `[large_from, large_to)` pages; every page translates, to its
/// leaf's frame plus its offset; the leaf's frames are contiguous.
fn check_model(v: &V<'_>, a: VirtAddr, pages: u64, large_from: u64, large_to: u64) {
    for p in 0..pages {
        let t = v.translate(va(a, p)).expect("every page is mapped");
        let large = (large_from..large_to).contains(&p);
        assert_eq!(t.size, if large { HUGE } else { PAGE }, "page {p}");
        assert_eq!(t.level, if large { 2 } else { 3 }, "page {p}");
        let off = va(a, p).as_u64() % t.size;
        assert_eq!(t.phys.as_u64(), t.frame.as_u64() + off);
        assert_eq!(t.frame.as_u64() % t.size, 0, "runs are naturally aligned");
        // vmalloc_to_phys, a byte inside the page.
        let inside = VirtAddr::new(va(a, p).as_u64() + 0x123);
        assert_eq!(
            v.vmalloc_to_phys(inside).unwrap().as_u64(),
            t.phys.as_u64() + 0x123
        );
    }
    assert!(v.translate(va(a, pages)).is_none(), "the guard page");
}

#[test]
#[cfg_attr(miri, ignore = "1027 translations and writes: slow under miri")]
fn huge_area_maps_large_leaves_translates_every_page_and_frees_runs_whole() {
    let arena = arena(32 << 20);
    let src = Src::new(&arena);
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, window(0, 256 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    // Something small first, so the huge area cannot start at the window's
    // (aligned) start by chance.
    let small = v.vmalloc(PAGE).unwrap();
    let pages = 2 * PER + 3;
    let a = v.vmalloc_huge(pages * PAGE).unwrap();
    assert_eq!(a.as_u64() % HUGE, 0, "aligned to the large leaf");
    check_model(&v, a, pages, 0, 2 * PER);
    let info = info_at(&v, a);
    assert_eq!(info.leaves(), ((HUGE, 2), (PAGE, 3)));
    assert!(info.flags.contains(VmFlags::HUGE));
    let s = v.stats();
    assert_eq!(
        (s.huge_leaves, s.huge_leaves_mapped, s.huge_fallbacks),
        (2, 2, 0)
    );
    assert_eq!(s.pagetable_bytes_saved, 2 * PAGE);
    // Every page holds its own byte: the leaves map distinct memory.
    for p in 0..pages {
        v.write_byte(va(a, p), p as u8).unwrap();
    }
    for p in 0..pages {
        assert_eq!(v.read_byte(va(a, p)).unwrap(), p as u8);
    }
    let runs: Vec<PhysAddr> = [0, PER]
        .iter()
        .map(|&p| v.translate(va(a, p)).unwrap().frame)
        .collect();
    src.freed();
    v.vfree(a).unwrap();
    let freed = src.freed();
    // Each large leaf went back as one run of its size; the tail page by page.
    for r in &runs {
        assert!(freed.contains(&(*r, HUGE)), "{r:?} freed whole");
    }
    assert_eq!(freed.iter().filter(|f| f.1 == PAGE).count(), 3);
    assert_eq!(freed.len(), 5);
    assert_eq!(v.stats().huge_leaves, 0);
    assert!(v.translate(a).is_none());
    v.vfree(small).unwrap();
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
    assert_eq!(frames_out(&mem, &v), 0, "nothing leaked");
}

#[test]
#[cfg_attr(miri, ignore = "two 2 MiB areas mapped page by page: slow under miri")]
fn huge_saves_the_last_level_tables_of_its_spans() {
    let arena = arena(32 << 20);
    let src = Src::new(&arena);
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    let huge: V =
        Vmalloc::new(&mem, window(0, 256 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let base: V =
        Vmalloc::new(&mem, window(0, 256 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let h = huge.vmalloc_huge(4 * HUGE).unwrap();
    let b = base.vmalloc_aligned(4 * HUGE, HUGE).unwrap();
    assert_eq!(base.pagetable_bytes() - huge.pagetable_bytes(), 4 * PAGE);
    assert_eq!(huge.stats().pagetable_bytes_saved, 4 * PAGE);
    assert_eq!(base.stats().pagetable_bytes_saved, 0);
    huge.vfree(h).unwrap();
    base.vfree(b).unwrap();
}

/// A window churned by small areas keeps an empty last-level table in
/// every span (vfree never frees tables); a huge area there still gets its
/// large leaves: each table gives way (`pmd_free_pte_page`), after a flush.
#[test]
#[cfg_attr(miri, ignore = "thousands of small areas: slow under miri")]
fn tables_left_by_small_areas_give_way_to_large_leaves() {
    let arena = arena(32 << 20);
    let src = Src::new(&arena);
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    let checker = StaleTlbChecker::new(&tlb);
    let mut v: V =
        Vmalloc::new(&mem, window(0, 8 * HUGE), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    v.set_alloc_check(&checker);
    let mut small = Vec::new();
    while let Ok(a) = v.vmalloc(PAGE) {
        v.write_byte(a, 1).unwrap();
        tlb.touch_range(small.len() % CPUS, a, va(a, 1));
        small.push(a);
    }
    assert!(small.len() as u64 >= 8 * PER / 2 - 1, "{}", small.len());
    let tables = v.pagetable_bytes();
    for a in small {
        v.vfree(a).unwrap();
    }
    v.purge_vmap_area_lazy();
    assert_eq!(v.pagetable_bytes(), tables, "vfree keeps the tables");
    let a = v.vmalloc_huge(4 * HUGE).unwrap();
    check_model(&v, a, 4 * PER, 0, 4 * PER);
    let s = v.stats();
    assert_eq!((s.huge_leaves, s.huge_fallbacks), (4, 0));
    assert_eq!(
        v.pagetable_bytes(),
        tables - 4 * PAGE,
        "the four tables under the leaves went back"
    );
    assert_eq!(checker.violations(), 0);
    v.vfree(a).unwrap();
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
    assert_eq!(frames_out(&mem, &v), 0, "nothing leaked");
}

#[test]
#[cfg_attr(miri, ignore = "1024 translations: slow under miri")]
fn without_an_aligned_range_the_head_and_tail_are_base_pages() {
    let arena = arena(32 << 20);
    let src = Src::new(&arena);
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    // 4 MiB + 2 pages from one page past an aligned address: a 4 MiB area
    // with its guard fits only at the start, unaligned.
    let v: V = Vmalloc::new(
        &mem,
        window(PAGE, 2 * HUGE + 2 * PAGE),
        tlb.on(0),
        cpus(),
        LazyMaxPages,
    )
    .unwrap();
    let a = v.vmalloc_huge(2 * HUGE).unwrap();
    assert_eq!(a.as_u64(), VSTART + PAGE);
    // Head: 511 pages up to the 2 MiB boundary; one large leaf; tail: one page.
    check_model(&v, a, 2 * PER, PER - 1, 2 * PER - 1);
    assert_eq!(info_at(&v, a).leaves(), ((HUGE, 1), (PAGE, PER)));
    v.vfree(a).unwrap();
    v.purge_vmap_area_lazy();
    assert_eq!(frames_out(&mem, &v), 0);
}

#[test]
#[cfg_attr(miri, ignore = "1024 translations: slow under miri")]
fn without_contiguous_runs_huge_falls_back_to_base_pages() {
    let arena = arena(32 << 20);
    let src = Src::new(&arena);
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, window(0, 256 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    // No run at all.
    src.runs.store(0, Ordering::Relaxed);
    let a = v.vmalloc_huge(2 * HUGE).unwrap();
    check_model(&v, a, 2 * PER, 0, 0);
    let info = info_at(&v, a);
    assert_eq!(info.leaves(), ((0, 0), (PAGE, 2 * PER)));
    assert_eq!(v.stats().huge_fallbacks, 2);
    assert!(
        InfoLine(&info)
            .to_string()
            .contains(" vmalloc huge leaves=4K:1024 guard=after")
    );
    // One run: one span large, the other base pages.
    src.runs.store(1, Ordering::Relaxed);
    let b = v.vmalloc_huge(2 * HUGE).unwrap();
    check_model(&v, b, 2 * PER, 0, PER);
    assert_eq!(info_at(&v, b).leaves(), ((HUGE, 1), (PAGE, PER)));
    assert_eq!(v.stats().huge_fallbacks, 3);
    src.freed();
    v.vfree(a).unwrap();
    v.vfree(b).unwrap();
    let freed = src.freed();
    assert_eq!(freed.iter().filter(|f| f.1 == HUGE).count(), 1);
    assert_eq!(
        freed.iter().filter(|f| f.1 == PAGE).count(),
        3 * PER as usize
    );
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
    assert_eq!(frames_out(&mem, &v), 0, "nothing leaked");
}

#[test]
fn small_and_nowait_huge_requests_are_base_pages() {
    let arena = arena(8 << 20);
    let src = Src::new(&arena);
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, window(0, 64 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    // Below one large leaf: base pages, the request recorded.
    let a = v.vmalloc_huge(3 * PAGE).unwrap();
    let i = info_at(&v, a);
    assert_eq!(i.leaves(), ((0, 0), (PAGE, 3)));
    assert_eq!(i.flags, VmFlags::HUGE);
    assert!(
        InfoLine(&i)
            .to_string()
            .ends_with("vmalloc_huge pages=3 vmalloc huge leaves=4K:3 guard=after")
    );
    // NOWAIT: never a run from the source's slow path.
    let b = v
        .vmalloc_with(HUGE, PAGE, VmFlags::HUGE | VmFlags::NOWAIT, "atomic")
        .unwrap();
    assert_eq!(v.translate(b).unwrap().size, PAGE);
    assert!(!info_at(&v, b).flags.contains(VmFlags::HUGE));
    v.vfree(a).unwrap();
    v.vfree(b).unwrap();
    v.purge_vmap_area_lazy();
    assert_eq!(frames_out(&mem, &v), 0);
}

#[test]
#[cfg_attr(miri, ignore = "hundreds of failing attempts: slow under miri")]
fn every_failure_point_leaves_the_state_unchanged() {
    assert_eq!(vmalloc_huge_errors(), Ok(()));
}

/// Fails a huge vmalloc at every allocation in turn (runs, base pages,
/// tables, the walker's count store), then lets it through.
fn vmalloc_huge_errors() -> Result<(), String> {
    let arena = arena(32 << 20);
    let src = Src::new(&arena);
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, window(0, 256 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    assert_eq!(v.vmalloc_huge(0), Err(VmallocError::ZeroSize));
    assert!(matches!(
        v.vmalloc_huge(u64::MAX),
        Err(VmallocError::Overflow { .. })
    ));
    // Two spans and a tail: the tail's table is missing, so a failure
    // there comes after the spans were mapped (the unwind path).
    let keep = v.vmalloc(PAGE).unwrap();
    let pages = 2 * PER + 5;
    let (mut failures, mut succeeded) = (0, false);
    for budget in 0..10_000 {
        // Empties the frame caches, as the failed attempt's retry does.
        v.purge_vmap_area_lazy();
        src.budget.store(budget, Ordering::Relaxed);
        let before = (frames_out(&mem, &v), v.areas(), v.vmap_lazy_nr());
        let r = v.vmalloc_with(pages * PAGE, PAGE, VmFlags::HUGE, "huge");
        src.budget.store(u64::MAX, Ordering::Relaxed);
        match r {
            Err(e) => {
                failures += 1;
                // A shortage, never a leftover of an earlier attempt.
                if !matches!(
                    e,
                    VmallocError::OutOfFrames(_) | VmallocError::Map(WalkError::OutOfTables(_))
                ) {
                    return Err(format!("budget {budget}: {e:?}"));
                }
                // A failed attempt purges before its retry: nothing lazy
                // was there to begin with.
                let after = (frames_out(&mem, &v), v.areas(), v.vmap_lazy_nr());
                if after != before {
                    return Err(format!("budget {budget}: {before:?} -> {after:?}"));
                }
                v.check_consistency()?;
                if v.stats().huge_leaves != 0 {
                    return Err(format!("budget {budget}: leaves counted"));
                }
            }
            Ok(a) => {
                check_model(&v, a, pages, 0, 2 * PER);
                v.vfree(a).map_err(|e| e.to_string())?;
                succeeded = true;
                break;
            }
        }
    }
    assert!(succeeded, "a budget large enough lets it through");
    assert!(failures >= 8, "only {failures} failure points");
    // Nothing was lazy: the only flush is the unwind's of visible entries.
    assert!(v.stats().flush_events >= 1, "the unwind flushed");
    v.vfree(keep).map_err(|e| e.to_string())?;
    v.purge_vmap_area_lazy();
    assert_eq!(frames_out(&mem, &v), 0, "nothing leaked");
    assert_eq!(v.stats().huge_leaves, 0);
    Ok(())
}

/// vmalloc_huge, every page touched from a rotating CPU, vfree; the
/// stale-TLB checker on each area handed out. Returns (violations, checks).
fn stale_loop(broken: bool, iterations: u64) -> (u64, u64) {
    let arena = arena(64 << 20);
    let src = Src::new(&arena);
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    let checker = StaleTlbChecker::new(&tlb);
    let mut v: V = Vmalloc::new(&mem, window(0, 1 << 30), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    v.set_alloc_check(&checker);
    v.set_release_before_flush(broken);
    let pages = PER + 2;
    for i in 0..iterations {
        let a = v.vmalloc_huge(pages * PAGE).unwrap();
        assert_eq!(v.translate(a).unwrap().size, HUGE);
        v.write_byte(va(a, i % pages), i as u8).unwrap();
        tlb.touch_range(i as usize % CPUS, a, va(a, pages));
        v.vfree(a).unwrap();
    }
    v.purge_vmap_area_lazy();
    if !broken {
        v.check_consistency().unwrap();
        assert_eq!(frames_out(&mem, &v), 0, "nothing leaked");
    }
    (checker.violations(), checker.checks())
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the soft TLB holds 514 pages per area: slow under miri"
)]
fn the_huge_zap_path_hands_out_no_range_a_cpu_may_translate() {
    assert_eq!(stale_loop(false, 64), (0, 64));
    // The broken order (range released at vfree, before the flush) is
    // caught on the same path.
    let (violations, _) = stale_loop(true, 8);
    assert!(violations > 0);
}

#[test]
#[cfg_attr(miri, ignore = "copies 2 MiB page by page: slow under miri")]
fn vrealloc_moves_a_huge_area_and_keeps_its_contents() {
    let arena = arena(32 << 20);
    let src = Src::new(&arena);
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, window(0, 256 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let a = v.vmalloc_huge(2 * HUGE).unwrap();
    for p in (0..2 * PER).step_by(7) {
        v.write_byte(va(a, p), p as u8).unwrap();
    }
    // Shrinking moves: in place would split a leaf.
    let b = v.vrealloc(a, HUGE + PAGE).unwrap();
    assert_ne!(a, b);
    assert_eq!(info_at(&v, b).leaves(), ((HUGE, 1), (PAGE, 1)));
    for p in (0..=PER).step_by(7) {
        assert_eq!(v.read_byte(va(b, p)).unwrap(), p as u8);
    }
    let c = v.vrealloc(b, 3 * HUGE).unwrap();
    assert_eq!(info_at(&v, c).leaves(), ((HUGE, 3), (PAGE, 0)));
    for p in (0..=PER).step_by(7) {
        assert_eq!(v.read_byte(va(c, p)).unwrap(), p as u8);
    }
    assert_eq!(v.stats().huge_leaves, 3);
    v.vfree(c).unwrap();
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
    assert_eq!(frames_out(&mem, &v), 0, "nothing leaked");
}

#[test]
fn a_one_leaf_area_under_miri() {
    // The small case Miri runs: one 2 MiB leaf, mapped, written, freed.
    let arena = arena(8 << 20);
    let src = Src::new(&arena);
    let mem = VmallocMem::new(&src);
    let tlb = tlb();
    let v: V = Vmalloc::new(&mem, window(0, 64 << 20), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let a = v.vmalloc_huge(HUGE).unwrap();
    let t = v.translate(va(a, 5)).unwrap();
    assert_eq!((t.size, t.level), (HUGE, 2));
    v.write_byte(va(a, PER - 1), 9).unwrap();
    assert_eq!(v.read_byte(va(a, PER - 1)).unwrap(), 9);
    assert_eq!(
        v.vmalloc_to_phys(va(a, 3)).unwrap().as_u64(),
        t.frame.as_u64() + 3 * PAGE
    );
    src.freed();
    v.vfree(a).unwrap();
    assert_eq!(src.freed(), vec![(t.frame, HUGE)]);
    v.purge_vmap_area_lazy();
    assert_eq!(frames_out(&mem, &v), 0);
}

/// One area of a large leaf and two pages on layout `L`, whose large leaf
/// is `span` bytes: mapped by one leaf of that size at level `LEVELS - 2`,
/// freed whole.
fn one_leaf_on<L: arch_api::PageTableLayout>(span: u64) {
    let ps = L::PAGE_SIZE;
    let arena = PhysArena::new(2 * span, ps).unwrap();
    let mem = VmallocMem::new(&arena);
    let tlb = arch_api::SoftTlb::new(CPUS, ps, arch_api::CostModel::FREE);
    type KL<'a, L> = vmap_lazy::testing::Hosted<'a, L>;
    let w = OneSpace::<KL<'_, L>>::new(VirtAddr::new(VSTART), VirtAddr::new(VSTART + 8 * span), ps)
        .unwrap();
    let v: Vmalloc<'_, KL<'_, L>> = Vmalloc::new(&mem, w, tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let a = v.vmalloc_huge(span + 2 * ps).unwrap();
    assert_eq!(a.as_u64() % span, 0, "{}", L::NAME);
    let t = v.translate(VirtAddr::new(a.as_u64() + span - 1)).unwrap();
    assert_eq!((t.size, t.level), (span, L::LEVELS - 2), "{}", L::NAME);
    let tail = v.translate(VirtAddr::new(a.as_u64() + span)).unwrap();
    assert_eq!(tail.size, ps);
    let info = v.areas()[0];
    assert_eq!(info.leaves(), ((span, 1), (ps, 2)));
    let line = InfoLine(&info).to_string();
    assert!(line.contains(" huge leaves="), "{line}");
    v.vfree(a).unwrap();
    v.purge_vmap_area_lazy();
    assert_eq!(
        mem.bytes_out(),
        v.pagetable_bytes(),
        "{}: nothing leaked",
        L::NAME
    );
}

#[test]
fn each_layout_uses_its_own_large_leaf() {
    one_leaf_on::<arch_x86_64::X86_64Pml4>(2 << 20);
    one_leaf_on::<arch_x86_64::X86_64La57>(2 << 20);
    one_leaf_on::<arch_aarch64::Aarch64Granule4K>(2 << 20);
    one_leaf_on::<arch_aarch64::Aarch64Granule16K>(32 << 20);
}

#[test]
#[cfg_attr(miri, ignore = "a 1 GiB arena: too large for miri")]
fn the_64k_granule_maps_512_mib_leaves() {
    one_leaf_on::<arch_aarch64::Aarch64Granule64K>(512 << 20);
}
