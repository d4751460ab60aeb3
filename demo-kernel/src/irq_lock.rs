//! The IRQ-safe spinlock both demo kernels lock with
//! (`spin_lock_irqsave`), over the arch's interrupt mask (`super::irq`) and
//! per-CPU area (`super::percpu`). Included by each arch module (`#[path]`),
//! so `super` is the arch.
//!
//! The family's locks and the frame bitmap are taken from the timer
//! interrupt (it allocates), so a lock held with interrupts open could be
//! wanted again by an interrupt on the same CPU and never be released. The
//! mask is counted per CPU (`Area::locks_held`): the first lock a CPU takes
//! saves its mask, the last one it releases restores it, so locks may be
//! released in any order without opening interrupts while another lock is
//! still held.

use core::sync::atomic::{AtomicBool, Ordering};

/// Interrupts masked on this CPU until drop (`local_irq_save` /
/// `local_irq_restore`): `pin`'s guard. The `no-pin` build's guard masks
/// nothing (deliberately broken: the tick may cut into a pinned section).
pub struct IrqGuard(Option<u64>);

impl IrqGuard {
    /// Masks interrupts on this CPU.
    #[inline(always)]
    pub fn new() -> Self {
        if cfg!(feature = "no-pin") {
            return Self(None);
        }
        Self(Some(super::irq::save_and_mask()))
    }
}

impl Drop for IrqGuard {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(saved) = self.0 {
            super::irq::restore(saved);
        }
    }
}

/// A test-and-set spinlock that masks interrupts on the holding CPU.
pub struct IrqSpinLock {
    locked: AtomicBool,
}

// SAFETY: `lock` returns only once this CPU flipped `locked` from false to
// true with Acquire, `unlock` stores false with Release: one holder at a
// time, and the holder's accesses are ordered before the next holder's.
// Interrupts stay masked on a CPU while it holds any of these locks.
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
                // What the arch must do while it waits with interrupts
                // masked (x86: serve TLB shootdown requests the holder may
                // be waiting for).
                super::irq::while_spinning();
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

/// Masks interrupts and counts one more lock held by this CPU; the first
/// saves the mask to restore.
fn enter() {
    let saved = super::irq::save_and_mask();
    let me = super::percpu::this_cpu();
    // Relaxed: only this CPU touches its counters, with interrupts masked.
    if me.locks_held.fetch_add(1, Ordering::Relaxed) == 0 {
        me.locks_saved.store(saved, Ordering::Relaxed);
    }
}

/// Counts one lock fewer; the last one restores the saved mask.
fn leave() {
    let me = super::percpu::this_cpu();
    if me.locks_held.fetch_sub(1, Ordering::Relaxed) == 1 {
        super::irq::restore(me.locks_saved.load(Ordering::Relaxed));
    }
}
