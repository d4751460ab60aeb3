//! `smp-loop`: every online CPU at once runs a kmalloc/kfree loop (the
//! global allocator, plus one `KmemCache` every CPU shares) and a
//! vmalloc/vfree loop on the kernel's one `Vmalloc`, while its tick
//! allocates too. In the vmalloc loop each CPU also reads the areas the
//! other CPUs published (`stale_check.rs`), so a purge's flush must reach
//! their TLBs. CPU 0 then checks what the single-CPU workloads check,
//! across CPUs: no object handed to two owners (each is filled with its
//! owner's pattern and checked before it is freed), no stale translation,
//! no vmalloc page leaked, and the shared cache destroyed with every slab
//! back (`kmem_cache_destroy` fails on a live object).

use super::stale_check::{self, MAX};
use super::vmalloc_loop::{KernelVmalloc, PAGES, VMEM};
use super::{check, kprint};
use crate::arch::{self, Layout as ArchLayout};
use crate::frames::Frames;
use crate::platform::DemoKernel;
use alloc::alloc::{alloc, dealloc};
use arch_api::PageTableLayout;
use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};
use slub_core::{CacheFlags, KmemCache};

/// kmalloc rounds per CPU (each allocates up to `LIVE` objects).
const KMALLOC_ROUNDS: u64 = 400;
/// Objects live at once per CPU.
const LIVE: usize = 16;
/// vmalloc/vfree pairs, shared out over the CPUs: enough freed pages
/// (`VMALLOC_TOTAL * PAGES`) to pass vmap-lazy's `lazy_max_pages` for 8
/// possible CPUs (32768 pages) once, so a purge with its broadcast flush
/// runs while the other CPUs are still allocating and touching pages.
const VMALLOC_TOTAL: u64 = 10_000;
/// Object size of the shared cache.
const SHARED_SIZE: usize = 96;
/// vmallocs between two explicit purges on each CPU.
const PURGE_EVERY: u64 = 8;

/// What each CPU reports: pattern violations, stale pages, vmalloc errors,
/// cycles.
static BAD: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
static STALE: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
static ERRORS: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
static CYCLES: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];

/// The shared vmalloc and cache for the workers (`run_on_all` takes a plain
/// `fn`).
static VM: AtomicPtr<KernelVmalloc> = AtomicPtr::new(core::ptr::null_mut());
static CACHE: AtomicPtr<KmemCache<DemoKernel>> = AtomicPtr::new(core::ptr::null_mut());

/// The pattern of object `i` of CPU `cpu`.
fn pattern(cpu: usize, i: u64) -> u8 {
    (cpu as u8).wrapping_mul(37) ^ (i as u8) | 1
}

fn filled(p: *const u8, len: usize, b: u8) -> bool {
    // SAFETY: `p` is a live object of at least `len` bytes the caller owns.
    let obj = unsafe { core::slice::from_raw_parts(p, len) };
    obj.iter().all(|&x| x == b)
}

/// One CPU's share.
fn worker(cpu: usize) {
    // SAFETY: `run` stored both before `run_on_all` and frees neither until
    // every CPU is done.
    let (vm, cache) = unsafe { (&*VM.load(Relaxed), &*CACHE.load(Relaxed)) };
    let t0 = arch::cycles();
    let mut bad = 0;
    let mut errors = 0;
    let mut live: [(*mut u8, usize, u8); LIVE] = [(core::ptr::null_mut(), 0, 0); LIVE];
    let mut shared: [Option<(NonNull<u8>, u8)>; LIVE] = [None; LIVE];
    for round in 0..KMALLOC_ROUNDS {
        for (k, slot) in live.iter_mut().enumerate() {
            let i = round * LIVE as u64 + k as u64;
            let size = 8 << (i % 9); // 8..2048
            let b = pattern(cpu, i);
            let Ok(layout) = Layout::from_size_align(size, 8) else {
                continue;
            };
            // SAFETY: a non-zero-size layout; filled, checked and freed
            // once below with the same layout.
            let p = unsafe { alloc(layout) };
            if p.is_null() {
                errors += 1;
                continue;
            }
            // SAFETY: a fresh object of `size` bytes.
            unsafe { p.write_bytes(b, size) };
            *slot = (p, size, b);
        }
        for (k, s) in shared.iter_mut().enumerate() {
            let b = pattern(cpu, round + k as u64);
            match cache.alloc() {
                Ok(p) => {
                    // SAFETY: a fresh object of the cache's size.
                    unsafe { p.as_ptr().write_bytes(b, SHARED_SIZE) };
                    *s = Some((p, b));
                }
                Err(_) => errors += 1,
            }
        }
        for slot in live.iter_mut() {
            let (p, size, b) = *slot;
            if p.is_null() {
                continue;
            }
            if !filled(p, size, b) {
                bad += 1;
            }
            // SAFETY: allocated above with this layout, freed once.
            unsafe { dealloc(p, Layout::from_size_align_unchecked(size, 8)) };
            *slot = (core::ptr::null_mut(), 0, 0);
        }
        for s in shared.iter_mut() {
            if let Some((p, b)) = s.take() {
                if !filled(p.as_ptr(), SHARED_SIZE, b) {
                    bad += 1;
                }
                // SAFETY: allocated from this cache above, freed once.
                if unsafe { cache.free(p) }.is_err() {
                    errors += 1;
                }
            }
        }
    }
    let ps = ArchLayout::PAGE_SIZE;
    let mut stale = 0;
    let iters = VMALLOC_TOTAL / arch::online() as u64;
    let mut owner = stale_check::Owner::new(cpu);
    for i in 0..iters {
        if stale_check::stopped() {
            break;
        }
        match vm.vmalloc(PAGES * ps) {
            Ok(va) => {
                let (s, e) = owner.publish(vm, va);
                stale += s;
                errors += e;
            }
            Err(_) => errors += 1,
        }
        stale += stale_check::read_others(vm, cpu);
        // Frequent purges, so a freed range comes back while the other
        // CPUs' TLBs may still hold its old translations: a shootdown that
        // missed one shows as a stale read soon after.
        if i % PURGE_EVERY == PURGE_EVERY - 1 {
            vm.purge_vmap_area_lazy();
        }
    }
    errors += owner.retire_all(vm);
    BAD[cpu].store(bad, Relaxed);
    STALE[cpu].store(stale, Relaxed);
    ERRORS[cpu].store(errors, Relaxed);
    CYCLES[cpu].store(arch::cycles() - t0, Relaxed);
}

/// Runs the workload on every online CPU and checks the result on this one.
pub fn run(vm: &KernelVmalloc) {
    let cpus = arch::online().min(MAX);
    let mut cache = match KmemCache::<DemoKernel>::new(
        "smp-shared",
        SHARED_SIZE,
        8,
        CacheFlags::empty(),
        Frames,
        arch::cpus_online(),
    ) {
        Ok(c) => c,
        Err(e) => {
            check(false, format_args!("smp-loop: cache: {e:?}"));
            return;
        }
    };
    let before = vm.stats();
    VM.store(vm as *const KernelVmalloc as *mut KernelVmalloc, Relaxed);
    CACHE.store(&mut cache, Relaxed);
    let t0 = arch::cycles();
    arch::run_on_all(worker);
    let wall = arch::cycles() - t0;
    VM.store(core::ptr::null_mut(), Relaxed);
    CACHE.store(core::ptr::null_mut(), Relaxed);
    vm.purge_vmap_area_lazy();
    let st = vm.stats();
    let ps = ArchLayout::PAGE_SIZE;
    let leaked = (VMEM.bytes_out() - vm.pagetable_bytes()) / ps;
    let destroyed = cache.destroy();

    let n = cpus as u64 * (VMALLOC_TOTAL / cpus as u64);
    let sum = |a: &[AtomicU64; MAX]| a[..cpus].iter().map(|x| x.load(Relaxed)).sum::<u64>();
    let (bad, stale, errors) = (sum(&BAD), sum(&STALE), sum(&ERRORS));
    kprint!(
        "{{\"workload\":\"smp-loop\",\"arch\":\"{}\",\"cpus\":{cpus},\"kmalloc_rounds\":{KMALLOC_ROUNDS},\"live\":{LIVE},\"vmalloc_iterations\":{n},\"pages\":{PAGES},\"wall_cycles\":{wall},\"cycles_per_cpu\":[",
        arch::NAME
    );
    for (c, cycles) in CYCLES.iter().enumerate().take(cpus) {
        kprint!("{}{}", if c == 0 { "" } else { "," }, cycles.load(Relaxed));
    }
    kprint!(
        "],\"cross_cpu_area_reads\":{},\"purges\":{},\"tlb_flush_events\":{},\"pattern_violations\":{bad},\"stale_tlb_violations\":{stale},\"errors\":{errors},\"leaked_pages\":{leaked},\"shared_cache_destroyed\":{}}}\n",
        stale_check::cross_cpu_reads(),
        st.purges - before.purges,
        st.flush_events - before.flush_events,
        destroyed.is_ok(),
    );
    check(
        cpus == 1 || stale_check::cross_cpu_reads() > 0,
        format_args!("smp-loop: no CPU read another CPU's area"),
    );
    check(
        bad == 0,
        format_args!("smp-loop: {bad} objects overwritten by another owner"),
    );
    check(
        stale == 0,
        format_args!("smp-loop: {stale} stale-TLB violations"),
    );
    check(
        errors == 0,
        format_args!("smp-loop: {errors} allocation errors"),
    );
    check(
        leaked == 0,
        format_args!("smp-loop: {leaked} vmalloc pages leaked"),
    );
    check(
        // Stopped early by a stale read, which is the failure reported.
        stale_check::stopped() || (st.allocs - before.allocs == n && st.frees - before.frees == n),
        format_args!(
            "smp-loop: {} vmallocs, {} vfrees for {n}",
            st.allocs - before.allocs,
            st.frees - before.frees
        ),
    );
    check(
        st.purges - before.purges >= 2,
        format_args!("smp-loop: no purge ran during the loop"),
    );
    check(
        vm.vmap_lazy_nr() == 0,
        format_args!("smp-loop: {} lazy pages after the purge", vm.vmap_lazy_nr()),
    );
    check(
        destroyed.is_ok(),
        format_args!("smp-loop: destroying the shared cache: {destroyed:?}"),
    );
}
