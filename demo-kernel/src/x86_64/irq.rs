//! Masking maskable interrupts on this CPU (RFLAGS.IF), and the IRQ-safe
//! spinlock built on it: the family's locks and the frame bitmap are taken
//! from the timer interrupt (it allocates), so a lock held with IF set
//! could be wanted again by an interrupt on the same CPU and never be
//! released.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, Ordering};

/// RFLAGS.IF (bit 9).
const RFLAGS_IF: u64 = 1 << 9;

/// Clears IF, returning the previous RFLAGS.
#[inline(always)]
pub fn save_and_cli() -> u64 {
    let flags: u64;
    // SAFETY: `pushfq`/`pop` read RFLAGS through the stack (balanced);
    // `cli` only stops this CPU taking maskable interrupts, and takes effect
    // at once (SDM Vol. 2A, CLI: no interrupt window after it). No `nomem`:
    // the critical section's accesses must stay after it.
    unsafe { asm!("pushfq", "pop {f}", "cli", f = out(reg) flags) };
    flags
}

/// Restores the IF of a value [`save_and_cli`] returned (only IF: the other
/// flags belong to the code in between).
#[inline(always)]
pub fn restore(flags: u64) {
    if flags & RFLAGS_IF != 0 {
        // SAFETY: IF was set when the matching `save_and_cli` ran, so this
        // puts back the state the caller had; no `nomem`: the critical
        // section's accesses stay before it.
        unsafe { asm!("sti", options(nostack)) };
    }
}

/// Sets IF on this CPU.
pub fn enable() {
    // SAFETY: the IDT has gates for every vector the APIC sends
    // (`idt.rs`), and the caller holds no lock: every lock a handler may
    // take is an `IrqSpinLock`, held with IF clear.
    unsafe { asm!("sti", options(nostack)) };
}

/// IF clear until drop (`local_irq_save` / `local_irq_restore`).
pub struct IrqGuard(u64);

impl IrqGuard {
    /// Clears IF on this CPU.
    #[inline(always)]
    pub fn new() -> Self {
        Self(save_and_cli())
    }
}

impl Drop for IrqGuard {
    #[inline(always)]
    fn drop(&mut self) {
        restore(self.0);
    }
}

/// A test-and-set spinlock that clears IF on the holding CPU
/// (`spin_lock_irqsave`). The mask is counted per CPU
/// (`Area::locks_held`): the first lock a CPU takes saves its RFLAGS, the
/// last one it releases restores IF from it, so locks may be released in
/// any order without opening interrupts while another is still held.
pub struct IrqSpinLock {
    locked: AtomicBool,
}

// SAFETY: `lock` returns only once this CPU flipped `locked` from false to
// true with Acquire, `unlock` stores false with Release: one holder at a
// time, and the holder's accesses are ordered before the next holder's.
// IF stays clear on a CPU while it holds any of these locks.
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
                // The holder may be waiting, IF clear, for this CPU to
                // acknowledge a TLB shootdown, which this CPU (IF clear
                // too) cannot take as an interrupt: serve it here.
                super::shootdown::poll();
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

/// Clears IF and counts one more lock held by this CPU; the first saves
/// the RFLAGS to restore.
fn enter() {
    let flags = save_and_cli();
    let me = super::percpu::this_cpu();
    // Relaxed: only this CPU touches its counters, with IF clear.
    if me.locks_held.fetch_add(1, Ordering::Relaxed) == 0 {
        me.locks_rflags.store(flags, Ordering::Relaxed);
    }
}

/// Counts one lock fewer; the last one restores the saved IF.
fn leave() {
    let me = super::percpu::this_cpu();
    if me.locks_held.fetch_sub(1, Ordering::Relaxed) == 1 {
        restore(me.locks_rflags.load(Ordering::Relaxed));
    }
}
