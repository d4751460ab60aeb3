//! `vmalloc-loop` on the real MMU: vmalloc, touch every page through the
//! new mapping, vfree; the lazy purges flush with real TLB instructions.
//!
//! The stale-TLB check is the hardware version of the harness's checker:
//! each page is written through its virtual address (the MMU's translation)
//! and read back through the direct map at the frame vmalloc's own tables
//! say it maps. A TLB entry surviving from an earlier, freed mapping of the
//! same address would send the write to the old frame, and the two reads
//! would disagree.

use super::{Ratio, check, kprint, tlb_delta};
use crate::arch;
use crate::frames::Frames;
use crate::platform::DemoKernel;
use arch_api::{PageTableLayout, PhysMap, VirtAddr};
use vmap_lazy::{LazyMaxPages, OneSpace, Vmalloc, VmallocMem};

/// Iterations (the harness default is larger; emulation is slow).
const ITERATIONS: u64 = 10_000;
/// Pages per vmalloc (`touch` writes each).
pub(super) const PAGES: u64 = 4;

/// The kernel's vmalloc, mapping into the kernel's own live page table.
pub type KernelVmalloc = Vmalloc<'static, DemoKernel>;

pub(super) static VMEM: VmallocMem<'static, Frames> = VmallocMem::new(&Frames);

/// The end of the kernel's vmalloc: the first half of the arch window. The
/// second half is cut in `SLICES` slices (`window_slice`), one per vmalloc
/// the SMP workloads attach, so no two attached vmallocs ever write entries
/// in the same range (tables an attached vmalloc added stay after it).
pub(super) const MAIN_END: u64 =
    arch::VMALLOC_START + (arch::VMALLOC_END - arch::VMALLOC_START) / 2;
/// Slices of the window's second half: 0..4 the purge policies'
/// (`policy_loop`), 4 and 5 test-vmalloc's fronts.
const SLICES: u64 = 8;

/// `[start, end)` of slice `k` of the window's second half.
pub(super) fn window_slice(k: usize) -> (u64, u64) {
    let size = (arch::VMALLOC_END - MAIN_END) / SLICES;
    let start = MAIN_END + k as u64 * size;
    (start, start + size)
}

/// Sets vmalloc up over the window of the kernel's live table, runs the loop
/// and returns it (it stays the kernel's vmalloc). The policy is the
/// harness's `augmented`: vmap-core's augmented free tree with
/// `lazy_max_pages` purging, `Vmalloc`'s defaults (one space under one
/// lock, `OneSpace`).
pub fn run() -> KernelVmalloc {
    let window = match OneSpace::<DemoKernel>::new(
        VirtAddr::new(arch::VMALLOC_START),
        VirtAddr::new(MAIN_END),
        arch::Layout::PAGE_SIZE,
    ) {
        Ok(w) => w,
        Err(e) => {
            kprint!("check failed: vmalloc window: {e:?}\n");
            arch::exit(1)
        }
    };
    let root = arch::kernel_root(arch::VMALLOC_START);
    // SAFETY: `root` is the live kernel table translating the window, in
    // identity-mapped RAM (`Frames`' direct map); nothing but this vmalloc
    // ever writes inside the window, and the table lives for ever.
    let vm = match unsafe {
        Vmalloc::attach(
            &VMEM,
            root,
            window,
            arch::tlb(),
            arch::cpus_online(),
            LazyMaxPages,
        )
    } {
        Ok(vm) => vm,
        Err(e) => {
            kprint!("check failed: vmalloc setup: {e:?}\n");
            arch::exit(1)
        }
    };

    let ps = arch::Layout::PAGE_SIZE;
    let mut stale = 0u64;
    let mut errors = 0u64;
    let start = arch::cycles();
    let ((), tlb_pages, tlb_full) = tlb_delta(|| {
        for i in 0..ITERATIONS {
            let va = match vm.vmalloc(PAGES * ps) {
                Ok(va) => va,
                Err(e) => {
                    errors += 1;
                    kprint!("check failed: vmalloc #{i}: {e:?}\n");
                    continue;
                }
            };
            stale += touch(&vm, va, i);
            if let Err(e) = vm.vfree(va) {
                errors += 1;
                kprint!("check failed: vfree #{i}: {e:?}\n");
            }
        }
        vm.purge_vmap_area_lazy();
    });
    let cycles = arch::cycles() - start;

    let st = vm.stats();
    let leaked = (VMEM.bytes_out() - vm.pagetable_bytes()) / ps;
    kprint!(
        "{{\"workload\":\"vmalloc-loop\",\"arch\":\"{}\",\"policy\":\"augmented\",\"iterations\":{ITERATIONS},\"pages\":{PAGES},\"cpus\":1,\"wall_cycles\":{cycles},\"cycles_per_iter\":{},\"nodes_visited_avg\":{},\"nodes_visited_max\":{},\"tlb_flush_events\":{},\"tlb_pages_flushed\":{},\"ipis\":{},\"purges\":{},\"stale_tlb_violations\":{stale},\"leaked_pages\":{leaked},\"tlbi_page_instructions\":{tlb_pages},\"tlbi_full_instructions\":{tlb_full}}}\n",
        arch::NAME,
        cycles / ITERATIONS,
        Ratio(st.nodes_visited, st.allocs.max(1)),
        st.nodes_visited_max,
        st.flush_events,
        st.pages_flushed,
        st.ipis,
        st.purges,
    );
    check(errors == 0, format_args!("vmalloc-loop: {errors} errors"));
    check(
        stale == 0,
        format_args!("vmalloc-loop: {stale} stale-TLB violations"),
    );
    check(
        leaked == 0,
        format_args!("vmalloc-loop: {leaked} pages leaked"),
    );
    check(
        st.allocs == ITERATIONS && st.frees == ITERATIONS,
        format_args!("vmalloc-loop: {} allocs, {} frees", st.allocs, st.frees),
    );
    check(
        vm.vmap_lazy_nr() == 0 && st.purges > 0 && st.flush_events == st.purges,
        format_args!(
            "vmalloc-loop: lazy {} after the final purge, {} purges, {} flushes",
            vm.vmap_lazy_nr(),
            st.purges,
            st.flush_events
        ),
    );
    check(
        tlb_pages + tlb_full >= st.flush_events,
        format_args!("vmalloc-loop: fewer TLBIs than flush events"),
    );
    check(
        vm.vmalloc_to_phys(VirtAddr::new(arch::VMALLOC_START))
            .is_none(),
        format_args!("vmalloc-loop: the window is still mapped"),
    );
    small_purge(&vm);
    vm
}

/// Writes a tag into every page of the `PAGES`-page area at `va` through
/// the MMU and reads it back both ways; returns the pages that disagreed.
pub(super) fn touch(vm: &KernelVmalloc, va: VirtAddr, i: u64) -> u64 {
    let ps = arch::Layout::PAGE_SIZE;
    let mut stale = 0;
    for p in 0..PAGES {
        let page = va.as_u64() + p * ps;
        // A different word each time, so a stale frame cannot match by luck.
        let word = page + (i % (ps / 8)) * 8;
        let tag = (i << 16 | p) ^ 0x5a5a_0000_0000_0000;
        // SAFETY: `page` was just mapped writable by vmalloc in the live
        // tables, `word` is an aligned u64 inside it.
        let through_mmu = unsafe {
            (word as *mut u64).write_volatile(tag);
            (word as *const u64).read_volatile()
        };
        let through_direct_map = vm.vmalloc_to_phys(VirtAddr::new(word)).map(|pa| {
            let p = crate::frames::Frames.phys_to_ptr(pa) as *const u64;
            // SAFETY: the frame vmalloc maps here, identity-mapped RAM.
            unsafe { p.read_volatile() }
        });
        if through_mmu != tag || through_direct_map != Some(tag) {
            stale += 1;
        }
    }
    stale
}

/// A purge below the flush ceiling: a few areas freed, one purge, which
/// must invalidate page by page (`tlbi vae1is` / `invlpg`), exactly the
/// pages the purge reports; then the same addresses are reused and must
/// read back (no stale entry survived).
fn small_purge(vm: &KernelVmalloc) {
    const AREAS: u64 = 4;
    let before = vm.stats();
    let mut stale = 0;
    let ((), tlb_pages, tlb_full) = tlb_delta(|| {
        for i in 0..AREAS {
            if let Ok(va) = vm.vmalloc(PAGES * arch::Layout::PAGE_SIZE) {
                stale += touch(vm, va, i);
                let _ = vm.vfree(va);
            }
        }
        vm.purge_vmap_area_lazy();
    });
    let flushed = vm.stats().pages_flushed - before.pages_flushed;
    for i in 0..AREAS {
        if let Ok(va) = vm.vmalloc(PAGES * arch::Layout::PAGE_SIZE) {
            stale += touch(vm, va, i + AREAS);
            let _ = vm.vfree(va);
        }
    }
    vm.purge_vmap_area_lazy();
    kprint!(
        "{{\"workload\":\"vmalloc-small-purge\",\"arch\":\"{}\",\"cpus\":1,\"areas\":{AREAS},\"pages\":{PAGES},\"tlb_pages_flushed\":{flushed},\"stale_tlb_violations\":{stale},\"tlbi_page_instructions\":{tlb_pages},\"tlbi_full_instructions\":{tlb_full}}}\n",
        arch::NAME,
    );
    check(
        stale == 0,
        format_args!("small purge: {stale} stale-TLB violations"),
    );
    check(
        tlb_full == 0 && tlb_pages == flushed && flushed > 0,
        format_args!(
            "small purge: {tlb_pages} page and {tlb_full} full invalidations for {flushed} pages"
        ),
    );
}
