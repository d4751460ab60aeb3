//! `vmalloc-loop-smp`: story 1's table on real shootdowns. The vmalloc
//! loop runs once per purge policy, on every online CPU at once: each CPU
//! vmallocs, stamps every page, reads the areas the other CPUs published
//! (`stale_check.rs`, so their translations sit in this CPU's TLB and a
//! purge must reach it), and frees its oldest area. Per policy it reports
//! the cycles, purges, flush instructions and the cross-CPU cost of the
//! flushes: shootdown IPIs sent on x86_64, broadcast `tlbi …is`
//! instructions on aarch64 (the interconnect, not an IPI, carries them).
//!
//! Each policy gets its own `Vmalloc` over its own slice of the second half
//! of the window (`vmalloc_loop::window_slice`): an attached vmalloc's tables
//! stay in the live root after it is dropped, so slices never overlap and
//! the kernel's own vmalloc never writes there.

use super::stale_check::{self, MAX};
use super::vmalloc_loop::{PAGES, window_slice};
use super::{check, kprint};
use crate::arch::{self, Layout as ArchLayout};
use crate::frames::Frames;
use crate::platform::DemoKernel;
use arch_api::{PageTableLayout, VirtAddr};
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};
use vmap_core::{Augmented, FreeAreaSearch, FreeVmapCache, Linear};
use vmap_lazy::{Eager, LazyMaxPages, OneSpace, PurgePolicy, Vmalloc, VmallocMem};

/// vmallocs per policy, shared out over the CPUs (192 each at `--smp 4`).
/// Scaled far down from the harness's loop (emulated, eager's every free is
/// a flush and, on x86_64, an IPI to each other CPU): the four policies
/// together stay under a second at `--smp 4`. Below `lazy_max_pages`, so
/// the lazy policies purge once, at the end; eager purges on every free.
const TOTAL: u64 = 768;

/// Policies run, each in its own slice of the window's second half.
const POLICIES: usize = 4;

/// One page-table and frame account per policy, so each run's leak check
/// sees only its own pages.
static MEM: [VmallocMem<'static, Frames>; POLICIES] =
    [const { VmallocMem::new(&Frames) }; POLICIES];

/// The running policy's vmalloc, for the workers (`run_on_all` takes a
/// plain `fn`).
static VM: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());
static STALE: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
static ERRORS: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
static CYCLES: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
/// CPUs arrived at the start of the current policy's loop.
static ARRIVED: AtomicU64 = AtomicU64::new(0);
/// Spins a worker waits for the others before it starts alone anyway (the
/// cross-read check then reports the missing CPU; a hang would not).
const START_SPINS: u64 = 1 << 26;

/// Waits until every online CPU has arrived: the lazy loops take about a
/// millisecond, less than the CPUs' start skew, so without it each CPU
/// would mostly run alone.
fn start_together() {
    ARRIVED.fetch_add(1, Relaxed);
    let cpus = arch::online() as u64;
    let mut spins = 0;
    while ARRIVED.load(Relaxed) < cpus && spins < START_SPINS {
        core::hint::spin_loop();
        spins += 1;
    }
}

type PolicyVmalloc<P, F> = Vmalloc<'static, DemoKernel, P, OneSpace<DemoKernel, F>>;

/// One CPU's share of one policy's loop.
fn worker<P: PurgePolicy, F: FreeAreaSearch>(cpu: usize) {
    // SAFETY: `run_policy` stored a live `PolicyVmalloc<P, F>` before
    // `run_on_all` and drops it only after every CPU returned.
    let vm = unsafe { &*(VM.load(Relaxed) as *const PolicyVmalloc<P, F>) };
    start_together();
    let t0 = arch::cycles();
    let (mut stale, mut errors) = (0, 0);
    let mut owner = stale_check::Owner::new(cpu);
    for _ in 0..TOTAL / arch::online() as u64 {
        if stale_check::stopped() {
            break;
        }
        match vm.vmalloc(PAGES * ArchLayout::PAGE_SIZE) {
            Ok(va) => {
                let (s, e) = owner.publish(vm, va);
                stale += s;
                errors += e;
            }
            Err(_) => errors += 1,
        }
        stale += stale_check::read_others(vm, cpu);
    }
    errors += owner.retire_all(vm);
    STALE[cpu].store(stale, Relaxed);
    ERRORS[cpu].store(errors, Relaxed);
    CYCLES[cpu].store(arch::cycles() - t0, Relaxed);
}

/// Shootdown IPIs sent so far, all CPUs (x86_64), or the TLB instructions
/// issued (aarch64: each is broadcast to every CPU by the `…is` form; a
/// `tlbi rvae1is` counts once, whatever pages it covers).
fn cross_cpu_flushes(cpus: usize) -> u64 {
    if arch::ipi_counts(0).is_some() {
        (0..cpus)
            .map(|c| arch::ipi_counts(c).map_or(0, |x| x.0))
            .sum()
    } else {
        let (_, f) = arch::tlb_counts();
        arch::va_flush().1 + f
    }
}

/// What one policy's run measured, for the eager-versus-lazy check.
struct Row {
    flushes: u64,
    ipis: u64,
}

/// Runs policy `P` with search `F` in slice `k` of the window.
fn run_policy<P: PurgePolicy + Default, F: FreeAreaSearch>(name: &str, k: usize) -> Row {
    let cpus = arch::online().min(MAX);
    let (start, end) = window_slice(k);
    let window = match OneSpace::<DemoKernel, F>::new(
        VirtAddr::new(start),
        VirtAddr::new(end),
        ArchLayout::PAGE_SIZE,
    ) {
        Ok(w) => w,
        Err(e) => {
            check(false, format_args!("{name}: window: {e:?}"));
            return Row {
                flushes: 0,
                ipis: 0,
            };
        }
    };
    let root = arch::kernel_root(start);
    // SAFETY: `root` is the live kernel table translating the window, in
    // identity-mapped RAM; the slice is this vmalloc's alone (the kernel's
    // vmalloc ends at `MAIN_END`, each policy has its own slice), and the
    // table lives for ever.
    let vm: PolicyVmalloc<P, F> = match unsafe {
        Vmalloc::attach(
            &MEM[k],
            root,
            window,
            arch::tlb(),
            arch::cpus_online(),
            P::default(),
        )
    } {
        Ok(vm) => vm,
        Err(e) => {
            check(false, format_args!("{name}: vmalloc setup: {e:?}"));
            return Row {
                flushes: 0,
                ipis: 0,
            };
        }
    };
    let reads0 = stale_check::cross_cpu_reads();
    let ipis0 = cross_cpu_flushes(cpus);
    let (tlb_p0, tlb_f0) = arch::tlb_counts();
    let va0 = arch::va_flush().1;
    VM.store(&vm as *const PolicyVmalloc<P, F> as *mut (), Relaxed);
    ARRIVED.store(0, Relaxed);
    let t0 = arch::cycles();
    arch::run_on_all(worker::<P, F>);
    let wall = arch::cycles() - t0;
    VM.store(core::ptr::null_mut(), Relaxed);
    vm.purge_vmap_area_lazy();
    let (tlb_p1, tlb_f1) = arch::tlb_counts();
    let va_ops = arch::va_flush().1 - va0;
    let ipis = cross_cpu_flushes(cpus) - ipis0;
    let reads = stale_check::cross_cpu_reads() - reads0;
    let st = vm.stats();
    let leaked = (MEM[k].bytes_out() - vm.pagetable_bytes()) / ArchLayout::PAGE_SIZE;
    let sum = |a: &[AtomicU64; MAX]| a[..cpus].iter().map(|x| x.load(Relaxed)).sum::<u64>();
    let (stale, errors) = (sum(&STALE), sum(&ERRORS));
    let n = cpus as u64 * (TOTAL / cpus as u64);
    kprint!(
        "{{\"workload\":\"vmalloc-loop-smp\",\"arch\":\"{}\",\"cpus\":{cpus},\"policy\":\"{name}\",\"iterations\":{n},\"pages\":{PAGES},\"wall_cycles\":{wall},\"cycles_per_cpu\":[",
        arch::NAME
    );
    for (c, cycles) in CYCLES.iter().enumerate().take(cpus) {
        kprint!("{}{}", if c == 0 { "" } else { "," }, cycles.load(Relaxed));
    }
    kprint!(
        "],\"purges\":{},\"tlb_flush_events\":{},\"tlb_pages_flushed\":{},\"tlbi_page_instructions\":{},\"tlbi_va_instructions\":{va_ops},\"tlbi_full_instructions\":{},\"{}\":{ipis},\"cross_cpu_area_reads\":{reads},\"stale_tlb_violations\":{stale},\"errors\":{errors},\"leaked_pages\":{leaked}}}\n",
        st.purges,
        st.flush_events,
        st.pages_flushed,
        tlb_p1 - tlb_p0,
        tlb_f1 - tlb_f0,
        if arch::ipi_counts(0).is_some() {
            "shootdown_ipis"
        } else {
            "broadcast_tlbi"
        },
    );
    // A stale read stops every worker early; it is the failure reported.
    if !stale_check::stopped() {
        check(
            errors == 0 && leaked == 0 && stale == 0,
            format_args!("{name}: {errors} errors, {leaked} pages leaked, {stale} stale reads"),
        );
        check(
            st.allocs == n && st.frees == n && vm.vmap_lazy_nr() == 0,
            format_args!(
                "{name}: {} vmallocs, {} vfrees for {n}, {} lazy pages",
                st.allocs,
                st.frees,
                vm.vmap_lazy_nr()
            ),
        );
        // Only a purge inside the loop reuses addresses, so only then can
        // a cross-CPU read catch a missed shootdown; the lazy loops (one
        // purge, at the end) may also finish before a sibling vCPU is
        // scheduled on a 2-core host, reading nothing.
        check(
            cpus == 1 || st.purges <= 1 || reads > 0,
            format_args!("{name}: no CPU read another CPU's area"),
        );
    }
    Row {
        flushes: st.flush_events,
        ipis,
    }
}

/// Runs the four policies one after the other, each on every CPU; eager
/// must flush (and, with several CPUs, shoot down) far more than the lazy
/// ones.
pub fn run() {
    let eager = run_policy::<Eager, Linear>("eager", 0);
    let lazy = [
        run_policy::<LazyMaxPages, Linear>("vanilla", 1),
        run_policy::<LazyMaxPages, FreeVmapCache>("free-area-cache", 2),
        run_policy::<LazyMaxPages, Augmented>("augmented", 3),
    ];
    if stale_check::stopped() {
        return;
    }
    let most = lazy.iter().map(|r| r.flushes).max().unwrap_or(0);
    let most_ipis = lazy.iter().map(|r| r.ipis).max().unwrap_or(0);
    check(
        eager.flushes > 10 * most.max(1),
        format_args!(
            "policies: eager {} flushes, lazy at most {most}",
            eager.flushes
        ),
    );
    check(
        arch::online() == 1 || cfg!(feature = "no-shootdown") || eager.ipis > 10 * most_ipis.max(1),
        format_args!(
            "policies: eager {} cross-CPU flushes, lazy at most {most_ipis}",
            eager.ipis
        ),
    );
}
