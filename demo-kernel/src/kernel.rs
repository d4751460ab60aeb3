//! The shared kernel, generic over `crate::arch`: slub-core is the global
//! allocator, vmap-lazy manages the vmalloc window in the live page tables
//! with the real TLB flusher, and the harness workloads run on the MMU.
//!
//! Each workload prints one JSON line (the keys of `/work/shared/HARNESS.md`
//! plus `"workload"`, and `*_cycles` where the harness has `*_ns`: ticks of
//! `arch::cycles()`, i.e. `cntvct_el0` (62.5 MHz on qemu `virt`) or the TSC;
//! timings under emulation say little anyway), then the TLB-instruction
//! counts, then `all checks passed` and exit status 0 — or
//! `check failed: …` and 1.

mod fault_test;
pub mod guard_page;
mod munmap;
mod policy_loop;
mod slab_smp;
mod slab_test;
mod smp_loop;
mod stale_check;
mod test_vmalloc;
pub mod tick_batch;
mod tick_cache;
mod vmalloc_loop;
mod zap_smp;

use crate::arch;
use crate::frames::{self, Frames};
use crate::platform::DemoKernel;
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use slub_core::SlubGlobalAlloc;

/// kmalloc over the kernel's frames and CPUs: slab pages straight from the
/// frame bitmap.
#[global_allocator]
static ALLOC: SlubGlobalAlloc<DemoKernel> = SlubGlobalAlloc::new(Frames, arch::CPU);

/// The console as a `core::fmt::Write` sink.
pub struct Console;

impl Write for Console {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        arch::console_write(s);
        Ok(())
    }
}

/// Prints formatted text on the console.
macro_rules! kprint {
    ($($t:tt)*) => {{
        use core::fmt::Write as _;
        let _ = core::write!(&mut $crate::kernel::Console, $($t)*);
    }};
}
pub(crate) use kprint;

/// Checks that failed so far.
static FAILED: AtomicU64 = AtomicU64::new(0);

/// Records a failed check unless `ok`.
pub fn check(ok: bool, what: core::fmt::Arguments<'_>) {
    if !ok {
        FAILED.fetch_add(1, Relaxed);
        kprint!("check failed: {what}\n");
    }
}

/// `x / n` with two decimals, as a JSON number.
pub struct Ratio(pub u64, pub u64);

impl core::fmt::Display for Ratio {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let hundredths = (self.0 as u128 * 100)
            .checked_div(self.1 as u128)
            .unwrap_or(0);
        write!(f, "{}.{:02}", hundredths / 100, hundredths % 100)
    }
}

/// The TLB instructions issued while `f` ran: (per-page, full).
pub fn tlb_delta<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    let (p0, a0) = arch::tlb_counts();
    let r = f();
    let (p1, a1) = arch::tlb_counts();
    (r, p1 - p0, a1 - a0)
}

/// Prints the ticks and the allocations done in interrupt context per CPU;
/// on a port that ticks, each online CPU must have allocated in its tick.
fn report_ticks(cpus: usize) {
    if arch::tick_counts(0).is_none() {
        return;
    }
    let counts =
        |k: usize| (0..cpus).map(move |c| arch::tick_counts(c).map_or(0, |t| [t.0, t.1, t.2][k]));
    kprint!(
        "{{\"workload\":\"irq\",\"arch\":\"{}\",\"cpus\":{cpus}",
        arch::NAME
    );
    for (k, key) in ["ticks", "irq_allocs", "irq_objects_overwritten"]
        .iter()
        .enumerate()
    {
        kprint!(",\"{key}\":[");
        for (i, v) in counts(k).enumerate() {
            kprint!("{}{v}", if i == 0 { "" } else { "," });
        }
        kprint!("]");
    }
    let nolock = tick_batch::NOLOCK.each_ref().map(|c| c.load(Relaxed));
    kprint!(
        ",\"irq_nolock_allocs\":{},\"irq_nolock_refused\":{},\"irq_nolock_free_errors\":{}",
        nolock[0],
        nolock[1],
        nolock[2]
    );
    kprint!("}}\n");
    check(
        nolock[0] > 0 && nolock[2] == 0,
        format_args!("irq: kmalloc_nolock in the tick: {nolock:?} (allocs, refused, free errors)"),
    );
    for (cpu, a) in counts(1).enumerate() {
        check(
            a > 0,
            format_args!("irq: CPU {cpu} allocated nothing in its tick"),
        );
    }
    let bad: u64 = counts(2).sum();
    check(
        bad == 0,
        format_args!("irq: {bad} tick objects overwritten"),
    );
}

/// Prints the TLB shootdown requests each CPU sent (one per target) and
/// served; every request sent must have been served, and with several CPUs
/// the workloads' purges must have sent some.
fn report_ipis(cpus: usize) {
    if arch::ipi_counts(0).is_none() {
        return;
    }
    let c: [(u64, u64); 8] = core::array::from_fn(|i| {
        if i < cpus {
            arch::ipi_counts(i).unwrap_or((0, 0))
        } else {
            (0, 0)
        }
    });
    let c = &c[..cpus];
    kprint!(
        "{{\"workload\":\"shootdown-ipi\",\"arch\":\"{}\",\"cpus\":{cpus},\"sent\":[",
        arch::NAME
    );
    for (i, (s, _)) in c.iter().enumerate() {
        kprint!("{}{s}", if i == 0 { "" } else { "," });
    }
    kprint!("],\"received\":[");
    for (i, (_, r)) in c.iter().enumerate() {
        kprint!("{}{r}", if i == 0 { "" } else { "," });
    }
    kprint!("]}}\n");
    let sent: u64 = c.iter().map(|x| x.0).sum();
    let got: u64 = c.iter().map(|x| x.1).sum();
    check(
        sent == got,
        format_args!("shootdown: {sent} requests sent, {got} served"),
    );
    check(
        cpus == 1 || sent > 0,
        format_args!("shootdown: {cpus} CPUs online but no IPI was sent"),
    );
}

/// Entered by the arch boot code with the MMU on, interrupts masked.
pub fn kernel_main() -> ! {
    let (start, end) = arch::free_ram();
    frames::init(start, end);
    kprint!(
        "demo-kernel ({}): MMU on, kernel root {:#x}, {} free frames at {start:#x}..{end:#x}\n",
        arch::NAME,
        arch::kernel_root(0).as_u64(),
        frames::total(),
    );
    match arch::check_va_flush_plan() {
        Ok(0) => kprint!("tlb: ranges invalidated by {}\n", arch::va_flush().0),
        Ok(n) => kprint!(
            "tlb: ranges invalidated by {} ({n} range plans checked against the operands' decoding)\n",
            arch::va_flush().0
        ),
        Err((start, pages)) => check(
            false,
            format_args!("tlb: the range plan for {pages} pages at {start:#x} is wrong"),
        ),
    }
    // Create the kmalloc caches now, before any CPU ticks: the tick
    // allocates, and a tick that cut into the global allocator's one-time
    // setup on the same CPU would spin on it for ever.
    check(
        ALLOC.kmalloc().is_some(),
        format_args!("slub-core: creating the kmalloc caches failed"),
    );
    let cpus = arch::start_secondaries();
    check(
        cpus == arch::online(),
        format_args!("smp: {cpus} CPUs started, {} online", arch::online()),
    );
    static RAN: AtomicU64 = AtomicU64::new(0);
    arch::run_on_all(|_cpu| {
        RAN.fetch_add(1, Relaxed);
    });
    check(
        RAN.load(Relaxed) == cpus as u64,
        format_args!(
            "smp: {} of {cpus} CPUs ran the first work",
            RAN.load(Relaxed)
        ),
    );

    // The kernel's vmalloc lives as long as the kernel: 'static, so the
    // fault path can look a faulting address up in it.
    let vm: &'static vmalloc_loop::KernelVmalloc =
        alloc::boxed::Box::leak(alloc::boxed::Box::new(vmalloc_loop::run()));
    guard_page::register(vm);
    if cfg!(feature = "guard-test") {
        guard_page::run(vm);
    }
    slab_test::run();
    zap_smp::run(vm);
    slab_smp::run();
    smp_loop::run(vm);
    policy_loop::run();
    test_vmalloc::run();
    check(
        ALLOC.served() > 0,
        format_args!("slub-core served no allocation"),
    );

    if cfg!(feature = "fault-test") {
        fault_test::run(vm);
    }

    report_ticks(cpus);
    report_ipis(cpus);

    let (pages, full) = arch::tlb_counts();
    let (path, va_ops, range_ops) = arch::va_flush();
    kprint!(
        "{{\"workload\":\"tlb-instructions\",\"arch\":\"{}\",\"cpus\":{cpus},\"page_invalidations\":{pages},\"full_invalidations\":{full},\"va_flush_path\":\"{path}\",\"va_instructions\":{va_ops},\"range_instructions\":{range_ops}}}\n",
        arch::NAME
    );
    // The range path must have run, and saved instructions: the small
    // purges and the policies' flushes cover several pages each.
    check(
        range_ops == 0 || va_ops < pages,
        format_args!("tlb: {va_ops} by-VA instructions for {pages} pages on the range path"),
    );
    check(
        !path.contains("rvae1is") || range_ops > 0,
        format_args!("tlb: FEAT_TLBIRANGE present but no tlbi rvae1is issued"),
    );
    let failed = FAILED.load(Relaxed);
    if failed == 0 {
        kprint!("all checks passed\n");
        arch::exit(0)
    }
    kprint!("{failed} checks failed\n");
    arch::exit(1)
}
