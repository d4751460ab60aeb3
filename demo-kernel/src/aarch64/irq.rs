//! Masking IRQs on this CPU (`DAIF.I`), and the IRQ-safe spinlock built on
//! it: the family's locks and the frame bitmap are taken from the timer
//! interrupt (it allocates), so a lock held with IRQs open could be wanted
//! again by an interrupt on the same CPU and never be released.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Masks IRQs, returning the previous `DAIF`.
#[inline(always)]
pub fn save_and_mask() -> u64 {
    let daif: u64;
    // SAFETY: reading DAIF and setting its I bit only changes whether this
    // CPU takes IRQs. No ISB: the Arm ARM (DDI 0487, PSTATE / DAIF) says
    // writes to PSTATE.{D, A, I, F} occur in program order without
    // additional synchronization, so no IRQ is taken after this point.
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

/// IRQs masked until drop (`local_irq_save` / `local_irq_restore`).
pub struct IrqGuard(u64);

impl IrqGuard {
    /// Masks IRQs on this CPU.
    #[inline(always)]
    pub fn new() -> Self {
        Self(save_and_mask())
    }
}

impl Drop for IrqGuard {
    #[inline(always)]
    fn drop(&mut self) {
        restore(self.0);
    }
}

/// A test-and-set spinlock that masks IRQs on the holding CPU
/// (`spin_lock_irqsave`). The DAIF saved at lock time lives in the lock
/// (only the holder writes it) and is restored at unlock, so locks must be
/// released in the reverse order they were taken — which the guards of the
/// family's `Mutex` do.
pub struct IrqSpinLock {
    locked: AtomicBool,
    saved_daif: AtomicU64,
}

// SAFETY: `lock` returns only once this CPU flipped `locked` from false to
// true with Acquire, `unlock` stores false with Release: one holder at a
// time, and the holder's accesses are ordered before the next holder's.
unsafe impl lock_api::RawMutex for IrqSpinLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        locked: AtomicBool::new(false),
        saved_daif: AtomicU64::new(0),
    };
    type GuardMarker = lock_api::GuardNoSend;

    fn lock(&self) {
        let daif = save_and_mask();
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.locked.load(Ordering::Relaxed) {
                core::hint::spin_loop();
            }
        }
        self.saved_daif.store(daif, Ordering::Relaxed);
    }

    fn try_lock(&self) -> bool {
        let daif = save_and_mask();
        let got = self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if got {
            self.saved_daif.store(daif, Ordering::Relaxed);
        } else {
            restore(daif);
        }
        got
    }

    unsafe fn unlock(&self) {
        let daif = self.saved_daif.load(Ordering::Relaxed);
        self.locked.store(false, Ordering::Release);
        restore(daif);
    }
}
