//! Masking IRQs on this CPU (`DAIF.I`): what the IRQ-safe spinlock
//! (`irq_lock.rs`) and `pin` build on.

use core::arch::asm;

/// Masks IRQs, returning the previous `DAIF`.
#[inline(always)]
pub fn save_and_mask() -> u64 {
    let daif: u64;
    // SAFETY: reading DAIF and setting its I bit only changes whether this
    // CPU takes IRQs. No ISB: the Arm ARM (DDI 0487 M.a, C5.1.3.3
    // "Instructions for accessing the PSTATE fields") says writes to
    // PSTATE occur in program order without additional synchronization, so no IRQ is taken after this point.
    unsafe {
        asm!("mrs {d}, daif", "msr daifset, #2", d = out(reg) daif, options(nostack));
    }
    daif
}

/// Restores a `DAIF` value [`save_and_mask`] returned.
#[inline(always)]
pub fn restore(daif: u64) {
    // SAFETY: puts back the mask this CPU had; the compiler barrier (no
    // `nomem`) keeps the critical section's accesses before it.
    unsafe { asm!("msr daif, {d}", d = in(reg) daif, options(nostack)) };
}

/// Unmasks IRQs on this CPU.
pub fn enable() {
    // SAFETY: the vectors handle IRQs from EL1 (`vectors.rs`), and the
    // caller holds no lock: every lock the handler may take is an
    // `IrqSpinLock`, held with IRQs masked.
    unsafe { asm!("msr daifclr, #2", options(nostack)) };
}

/// Nothing to do while spinning for a lock with IRQs masked: TLB
/// invalidation is broadcast by the hardware (`tlbi …is`), no IPI to serve.
#[inline(always)]
pub fn while_spinning() {}

/// Whether IRQs are unmasked on this CPU (`DAIF.I`, bit 7, clear).
#[inline(always)]
pub fn enabled() -> bool {
    let daif: u64;
    // SAFETY: reading DAIF has no side effects.
    unsafe { asm!("mrs {d}, daif", d = out(reg) daif, options(nomem, nostack)) };
    daif & (1 << 7) == 0
}
