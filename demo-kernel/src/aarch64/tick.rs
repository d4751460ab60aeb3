//! The periodic tick on every CPU: the EL1 virtual timer (PPI 27 on qemu
//! `virt`) through the GIC; what the tick does (allocate and free a few
//! small objects) is `kernel/tick_batch.rs`, shared with x86_64. The IRQ
//! handler here also takes the call SGI of `on_each_cpu` (`../call.rs`).

use super::{gic, percpu};
use core::arch::asm;
use core::sync::atomic::Ordering::Relaxed;

/// The virtual timer's PPI on qemu `virt` (the DTB's `/timer` node:
/// secure phys 29, phys 30, virt 27, hyp 26).
const VTIMER_PPI: u32 = 27;
/// Ticks per second.
const HZ: u64 = 1000;

/// `CNTFRQ_EL0 / HZ`: the counter ticks between two timer interrupts.
fn period() -> u64 {
    let f: u64;
    // SAFETY: reading the counter frequency has no side effects.
    unsafe { asm!("mrs {f}, cntfrq_el0", f = out(reg) f, options(nomem, nostack)) };
    (f / HZ).max(1)
}

fn arm_timer() {
    // SAFETY: CNTV_TVAL_EL0 = the countdown to the next interrupt;
    // CNTV_CTL_EL0 = ENABLE, IMASK clear (Arm ARM DDI 0487 M.a, D12.2
    // "The AArch64 view of the Generic Timer", D24.10.25 CNTV_CTL_EL0). Writing TVAL also clears the condition of a fired
    // level-sensitive timer interrupt.
    unsafe {
        asm!(
            "msr cntv_tval_el0, {t}",
            "msr cntv_ctl_el0, {c}",
            "isb",
            t = in(reg) period(),
            c = in(reg) 1u64,
            options(nostack),
        )
    };
}

/// The distributor, once, on the boot CPU before any CPU starts ticking.
pub fn init_global() {
    gic::init_distributor();
}

/// This CPU's interface and timer, then IRQs on: from here the tick can
/// cut into anything this CPU runs outside an IRQ-masked section.
pub fn start_this_cpu() {
    let me = percpu::this_cpu();
    me.gic_target
        .store(gic::init_cpu(VTIMER_PPI, super::call_ipi::SGI), Relaxed);
    arm_timer();
    super::irq::enable();
}

/// The Rust side of the IRQ vector: with IRQs masked (the CPU masked them
/// on entry), on the interrupted code's stack.
pub(super) extern "C" fn handle_irq() {
    let iar = gic::ack();
    let id = iar & 0x3ff;
    if id == gic::SPURIOUS {
        return;
    }
    if id == VTIMER_PPI {
        arm_timer();
        let me = percpu::this_cpu();
        me.ticks.fetch_add(1, Relaxed);
        let (done, bad) = crate::kernel::tick_batch::run(me.id);
        me.irq_bad.fetch_add(bad, Relaxed);
        me.irq_allocs.fetch_add(done, Relaxed);
    } else if id == super::call_ipi::SGI {
        super::call::serve();
    }
    gic::end(iar);
}

/// (ticks, allocations in the tick handler, tick objects found
/// overwritten) of CPU `cpu`.
pub fn counts(cpu: usize) -> (u64, u64, u64) {
    let a = &percpu::AREAS[cpu];
    (
        a.ticks.load(Relaxed),
        a.irq_allocs.load(Relaxed),
        a.irq_bad.load(Relaxed),
    )
}
