//! Starting the other CPUs through PSCI `CPU_ON` and handing them work.
//!
//! PSCI (Arm DEN 0022) `CPU_ON` (SMC64 function id 0xC400_0003): x1 the
//! target's MPIDR affinity, x2 the entry point (physical), x3 a context
//! that arrives in the target's x0. The target starts at EL1 with the MMU
//! and caches off (PSCI, `CPU_ON`: the entry's state) and FP/SIMD trapped, so `secondary_entry`
//! sets `CPACR_EL1.FPEN`, `TPIDR_EL1` (the context: its per-CPU area) and
//! SP, then turns the MMU on with the boot CPU's registers (same tables,
//! same memory attributes) before any Rust runs.
//!
//! The conduit (HVC or SMC) and the MPIDRs come from the DTB (`dtb.rs`).

use super::boot::{MMU_REGS, clean_to_poc};
use super::dtb::{self, Conduit};
use super::percpu::{self, AREA_STACK_TOP, AREAS, Area, MAX_CPUS};
use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const PSCI_CPU_ON_64: u64 = 0xC400_0003;

global_asm!(
    r#"
    .section .text.boot, "ax"
    .global demo_secondary_entry
demo_secondary_entry:
    // x0: this CPU's per-CPU area (PSCI's context id).
    msr     tpidr_el1, x0
    ldr     x1, [x0, #{stack_top}]
    mov     sp, x1
    mov     x1, #(3 << 20)
    msr     cpacr_el1, x1
    ldr     x1, ={vectors}
    msr     vbar_el1, x1
    // The boot CPU's MAIR, TCR, TTBR0, TTBR1 and SCTLR (WXN included),
    // cleaned to the point of coherency before CPU_ON: read here with the
    // MMU and data cache off, i.e. from memory. The same values on every
    // CPU: shared Normal memory must be mapped with the same attributes
    // and cacheability everywhere, or coherency is lost (Arm ARM DDI 0487
    // M.a, B2.11 "Mismatched memory attributes"), and the walks must be cacheable on
    // every CPU to see the tables the boot CPU wrote with its caches on.
    ldr     x1, ={regs}
    ldp     x2, x3, [x1]
    msr     mair_el1, x2
    msr     tcr_el1, x3
    ldp     x2, x3, [x1, #16]
    msr     ttbr0_el1, x2
    msr     ttbr1_el1, x3
    isb
    // No entry from before reset may be used: the Arm ARM (DDI 0487 M.a,
    // D8.16.1 "TLB behavior at reset") leaves TLB contents out of reset to
    // the implementation,
    // so invalidate before SCTLR_EL1.M is set.
    tlbi    vmalle1
    dsb     nsh
    isb
    ldr     x2, [x1, #32]
    msr     sctlr_el1, x2
    isb
    bl      {main}
1:  wfe
    b       1b
    .ltorg
"#,
    stack_top = const AREA_STACK_TOP,
    vectors = sym super::vectors::demo_vectors,
    regs = sym MMU_REGS,
    main = sym secondary_main,
);

unsafe extern "C" {
    /// The secondaries' entry (physical = virtual: identity-mapped).
    fn demo_secondary_entry();
}

/// CPUs online (the boot CPU included).
static ONLINE: AtomicUsize = AtomicUsize::new(1);

/// The work the secondaries run next (a `fn(usize)` as an address, 0: none)
/// and its generation; `DONE` counts the CPUs that finished it.
static WORK: AtomicUsize = AtomicUsize::new(0);
static WORK_GEN: AtomicU64 = AtomicU64::new(0);
static DONE: AtomicUsize = AtomicUsize::new(0);

/// CPUs online.
pub fn online() -> usize {
    ONLINE.load(Ordering::Acquire)
}

fn psci_cpu_on(conduit: Conduit, mpidr: u64, entry: u64, context: u64) -> i64 {
    let ret: u64;
    // SAFETY: a PSCI call; SMCCC lets the callee clobber x0..x17 (v1.0),
    // which are all declared. The new CPU touches only its own area, its
    // own stack and the shared read-only MMU registers.
    unsafe {
        match conduit {
            Conduit::Hvc => asm!("hvc #0",
                inout("x0") PSCI_CPU_ON_64 => ret, inout("x1") mpidr => _,
                inout("x2") entry => _, inout("x3") context => _,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
                out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _,
                out("x14") _, out("x15") _, out("x16") _, out("x17") _, options(nostack)),
            Conduit::Smc => asm!("smc #0",
                inout("x0") PSCI_CPU_ON_64 => ret, inout("x1") mpidr => _,
                inout("x2") entry => _, inout("x3") context => _,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
                out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _,
                out("x14") _, out("x15") _, out("x16") _, out("x17") _, options(nostack)),
        }
    }
    ret as i64
}

/// This CPU's MPIDR_EL1 affinity fields (Aff3, Aff2, Aff1, Aff0).
fn my_mpidr() -> u64 {
    let m: u64;
    // SAFETY: reading an ID register has no side effects.
    unsafe { asm!("mrs {m}, mpidr_el1", m = out(reg) m, options(nomem, nostack)) };
    m & 0xff_00ff_ffff
}

/// Starts every CPU the DTB lists; returns how many are online, with a
/// line for the console.
pub fn start_secondaries() -> usize {
    // The tick first: the boot CPU ticks even if it stays alone.
    super::tick::init_global();
    super::tick::start_this_cpu();
    let Some(info) = dtb::cpu_info() else {
        crate::kernel::kprint!("smp: no DTB at {:#x}: one CPU\n", dtb::DTB_ADDR);
        return 1;
    };
    let Some(conduit) = info.conduit else {
        crate::kernel::kprint!("smp: the DTB has no /psci method: one CPU\n");
        return 1;
    };
    let me = my_mpidr();
    AREAS[0].mpidr.store(me, Ordering::Relaxed);

    AREAS[0].online.store(true, Ordering::Release);
    clean_to_poc(
        &MMU_REGS as *const _ as u64,
        core::mem::size_of_val(&MMU_REGS),
    );
    let mut next = 1;
    for &mpidr in &info.mpidrs[..info.nr] {
        if mpidr == me || next >= MAX_CPUS {
            continue;
        }
        let area = percpu::prepare(next, mpidr);
        clean_to_poc(area as *const Area as u64, core::mem::size_of::<Area>());
        let r = psci_cpu_on(
            conduit,
            mpidr,
            demo_secondary_entry as *const () as u64,
            area as *const Area as u64,
        );
        if r != 0 {
            crate::kernel::kprint!("smp: CPU_ON({mpidr:#x}) returned {r}\n");
            continue;
        }
        // Wait for it to report in (bounded: a CPU that never comes is
        // reported, not waited for forever).
        let t0 = super::cycles();
        while !area.online.load(Ordering::Acquire) {
            if super::cycles() - t0 > 5 * counter_hz() {
                crate::kernel::kprint!(
                    "check failed: smp: CPU {next} ({mpidr:#x}) never came up\n"
                );
                super::exit(1);
            }
            core::hint::spin_loop();
        }
        next += 1;
    }
    ONLINE.store(next, Ordering::Release);
    crate::kernel::kprint!(
        "smp: {next} CPUs online (PSCI CPU_ON over {conduit:?}, MPIDRs {:x?})\n",
        &info.mpidrs[..info.nr]
    );
    next
}

/// A secondary, with the MMU on and its own stack.
extern "C" fn secondary_main() -> ! {
    let me = percpu::this_cpu();
    super::tick::start_this_cpu();
    me.online.store(true, Ordering::Release);
    let mut seen = 0;
    loop {
        let g = WORK_GEN.load(Ordering::Acquire);
        if g == seen {
            // Sleep until `run_on_all`'s SEV (or any event): spinning
            // vCPUs would starve the ones doing work on a small host.
            // SAFETY: waiting for an event has no effect on memory.
            unsafe { asm!("wfe", options(nomem, nostack)) };
            continue;
        }
        seen = g;
        let f = WORK.load(Ordering::Acquire);
        if f != 0 {
            // SAFETY: `run_on_all` stores only `fn(usize)` pointers.
            let f: fn(usize) = unsafe { core::mem::transmute::<usize, fn(usize)>(f) };
            f(me.id);
        }
        DONE.fetch_add(1, Ordering::AcqRel);
    }
}

/// Runs `f(cpu)` on every online CPU at once (this one included) and waits
/// for all of them.
pub fn run_on_all(f: fn(usize)) {
    let others = online() - 1;
    DONE.store(0, Ordering::Relaxed);
    WORK.store(f as usize, Ordering::Relaxed);
    WORK_GEN.fetch_add(1, Ordering::AcqRel);
    // SAFETY: `dsb` makes the new generation visible before the event
    // that wakes the secondaries out of `wfe`.
    unsafe { asm!("dsb ish", "sev", options(nostack)) };
    f(0);
    // Bounded: a CPU that stops answering is reported, not waited for.
    let t0 = super::cycles();
    while DONE.load(Ordering::Acquire) < others {
        if super::cycles() - t0 > RUN_TIMEOUT_S * counter_hz() {
            crate::kernel::kprint!(
                "check failed: smp: {} of {others} CPUs finished their work within {RUN_TIMEOUT_S} s\n",
                DONE.load(Ordering::Acquire)
            );
            super::exit(1);
        }
        core::hint::spin_loop();
    }
}

/// How long `run_on_all` waits for the other CPUs (virtual time).
const RUN_TIMEOUT_S: u64 = 60;

/// `CNTFRQ_EL0`, the counter's frequency.
fn counter_hz() -> u64 {
    let f: u64;
    // SAFETY: reading the counter frequency has no side effects.
    unsafe { asm!("mrs {f}, cntfrq_el0", f = out(reg) f, options(nomem, nostack)) };
    f
}
