//! `on_each_cpu`: runs a function on every online CPU, each in the handler
//! of an IPI, and waits for all (Linux's `smp_call_function_many` with
//! `wait`, what `kmem_cache_shrink`'s `flush_all` needs: a CPU's slab state
//! is flushed on that CPU). Shared by both ports; each sends its own IPI
//! (`call_ipi::send`: a fixed-vector IPI through the x86 local APIC, an
//! SGI through the aarch64 GIC) and calls [`serve`] from its handler.
//!
//! Mailboxes, no lock: sender `s` publishes a pointer to its function in
//! `FUNC[s]`, sets bit `s` in each target's `PENDING` word, sends the IPI,
//! runs the function itself, then waits for every bit to clear. A request
//! is served only by the IPI's handler, never from a wait loop (unlike the
//! x86 TLB shootdown's): the function touches per-CPU state, which a CPU
//! spinning with interrupts masked may be in the middle of changing. So
//! the sender waits with interrupts on (serving whatever is sent to it
//! meanwhile, another sender's call included) and must not be called with
//! them masked: it would wait for CPUs that may be waiting for it.

use super::irq_lock::IrqGuard;
use super::percpu::{self, MAX_CPUS};
use super::{call_ipi, irq};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// The function a call runs, as a sender keeps it on its stack.
type Func<'a> = &'a (dyn Fn(usize) + Sync);

/// Per sender: the address of its `Func` while it waits (0 otherwise).
static FUNC: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
/// Per target: bit `s` set while sender `s`'s call waits for it.
static PENDING: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Runs `f(cpu)` on every online CPU, each with interrupts masked (this
/// one's here, under the guard), and returns once all have: how many ran.
/// Interrupts must be on.
pub fn on_each_cpu(f: &(dyn Fn(usize) + Sync)) -> usize {
    let me = percpu::this_cpu().id;
    let online = super::smp::online();
    if !irq::enabled() {
        crate::kernel::kprint!(
            "check failed: on_each_cpu called with interrupts masked on CPU {me}\n"
        );
        super::exit(1);
    }
    let func: Func = f;
    if online > 1 {
        // Masked while sending: this CPU's IPI registers are not written by
        // an interrupt handler in between.
        let _g = IrqGuard::new();
        FUNC[me].store(&func as *const Func as usize, Ordering::Relaxed);
        for t in (0..online).filter(|&t| t != me) {
            // Release: the target that sees the bit sees `FUNC[me]`.
            PENDING[t].fetch_or(1 << me, Ordering::Release);
            call_ipi::send(t);
        }
    }
    {
        let _g = IrqGuard::new();
        f(me);
    }
    let t0 = super::cycles();
    for t in (0..online).filter(|&t| t != me) {
        // Acquire: the target's call returned before it cleared the bit.
        while PENDING[t].load(Ordering::Acquire) & (1 << me) != 0 {
            if super::cycles() - t0 > call_ipi::TIMEOUT {
                crate::kernel::kprint!(
                    "check failed: on_each_cpu: CPU {t} did not run CPU {me}'s call\n"
                );
                super::exit(1);
            }
            core::hint::spin_loop();
        }
    }
    FUNC[me].store(0, Ordering::Relaxed);
    online
}

/// Runs every call pending for this CPU: the call IPI's handler, with
/// interrupts masked.
pub fn serve() {
    let me = percpu::this_cpu().id;
    let mut bits = PENDING[me].load(Ordering::Acquire);
    while bits != 0 {
        let s = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        let p = FUNC[s].load(Ordering::Relaxed) as *const Func;
        // SAFETY: bit `s` is set, so sender `s` stored `FUNC[s]` before
        // setting it (Release, paired with the Acquire load above) and
        // waits for this CPU to clear it: the `Func` it points at lives on
        // the sender's stack until then, and is `Sync`.
        let f = unsafe { *p };
        f(me);
        // Release: the call returned before the sender sees the bit clear.
        PENDING[me].fetch_and(!(1 << s), Ordering::Release);
    }
}
