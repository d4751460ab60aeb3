//! Masking maskable interrupts on this CPU (RFLAGS.IF): what the IRQ-safe
//! spinlock (`irq_lock.rs`) and `pin` build on.

use core::arch::asm;

/// RFLAGS.IF (bit 9).
const RFLAGS_IF: u64 = 1 << 9;

/// Clears IF, returning the previous RFLAGS.
#[inline(always)]
pub fn save_and_mask() -> u64 {
    let flags: u64;
    // SAFETY: `pushfq`/`pop` read RFLAGS through the stack (balanced);
    // `cli` only stops this CPU taking maskable interrupts, and takes effect
    // at once (SDM Vol. 2A, CLI: no interrupt window after it). No `nomem`:
    // the critical section's accesses must stay after it.
    unsafe { asm!("pushfq", "pop {f}", "cli", f = out(reg) flags) };
    flags
}

/// Restores the IF of a value [`save_and_mask`] returned (only IF: the other
/// flags belong to the code in between).
#[inline(always)]
pub fn restore(flags: u64) {
    if flags & RFLAGS_IF != 0 {
        // SAFETY: IF was set when the matching `save_and_mask` ran, so this
        // puts back the state the caller had; no `nomem`: the critical
        // section's accesses stay before it.
        unsafe { asm!("sti", options(nostack)) };
    }
}

/// Whether IF is set on this CPU.
#[inline(always)]
pub fn enabled() -> bool {
    let flags: u64;
    // SAFETY: `pushfq`/`pop` read RFLAGS through the stack (balanced) and
    // change nothing.
    unsafe { asm!("pushfq", "pop {f}", f = out(reg) flags, options(nomem)) };
    flags & RFLAGS_IF != 0
}

/// Sets IF on this CPU.
pub fn enable() {
    // SAFETY: the IDT has gates for every vector the APIC sends
    // (`idt.rs`), and the caller holds no lock: every lock a handler may
    // take is an `IrqSpinLock`, held with IF clear.
    unsafe { asm!("sti", options(nostack)) };
}

/// While spinning for a lock with IF clear: the holder may be waiting, IF
/// clear, for this CPU to acknowledge a TLB shootdown, which this CPU
/// cannot take as an interrupt; serve it here.
#[inline(always)]
pub fn while_spinning() {
    super::shootdown::poll();
}
