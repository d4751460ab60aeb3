//! Masking IRQs on this CPU (`DAIF.I`), and the IRQ-safe spinlock built on
//! it: the family's locks and the frame bitmap are taken from the timer
//! interrupt (it allocates), so a lock held with IRQs open could be wanted
//! again by an interrupt on the same CPU and never be released.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, Ordering};

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
/// (`spin_lock_irqsave`). The mask is counted per CPU (`Area::locks_held`):
/// the first lock a CPU takes saves its `DAIF`, the last one it releases
/// restores it, so locks may be released in any order without opening IRQs
/// while another lock is still held.
pub struct IrqSpinLock {
    locked: AtomicBool,
}

// SAFETY: `lock` returns only once this CPU flipped `locked` from false to
// true with Acquire, `unlock` stores false with Release: one holder at a
// time, and the holder's accesses are ordered before the next holder's.
// IRQs stay masked on a CPU while it holds any of these locks.
unsafe impl lock_api::RawMutex for IrqSpinLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        locked: AtomicBool::new(false),
    };
    type GuardMarker = lock_api::GuardNoSend;

    fn lock(&self) {
        enter();
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.locked.load(Ordering::Relaxed) {
                core::hint::spin_loop();
            }
        }
    }

    fn try_lock(&self) -> bool {
        enter();
        let got = self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if !got {
            leave();
        }
        got
    }

    unsafe fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
        leave();
    }
}

/// Masks IRQs and counts one more lock held by this CPU; the first saves
/// the `DAIF` to restore.
fn enter() {
    let daif = save_and_mask();
    let me = super::percpu::this_cpu();
    // Relaxed: only this CPU touches its counters, with IRQs masked.
    if me.locks_held.fetch_add(1, Ordering::Relaxed) == 0 {
        me.locks_daif.store(daif, Ordering::Relaxed);
    }
}

/// Counts one lock fewer; the last one restores the saved `DAIF`.
fn leave() {
    let me = super::percpu::this_cpu();
    if me.locks_held.fetch_sub(1, Ordering::Relaxed) == 1 {
        restore(me.locks_daif.load(Ordering::Relaxed));
    }
}
