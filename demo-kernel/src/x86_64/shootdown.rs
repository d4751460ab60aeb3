//! The TLB shootdown: `X86Tlb`'s hook (`tlb.rs` installs it with
//! `with_shootdown`) sends a fixed-vector IPI to every other online CPU and
//! waits until each has run the same flush locally.
//!
//! `invlpg` and the CR4/CR3 flushes act on the executing CPU only (SDM
//! Vol. 3A §4.10.5 "Propagation of Paging-Structure Changes to Multiple
//! Processors": software must make the other processors invalidate, by an
//! IPI whose handler does it; qemu's vCPUs behave the same).
//!
//! Mailboxes, no lock: sender `s` publishes a pointer to its request in
//! `REQ[s]`, sets bit `s` in each target's `PENDING` word, sends the IPI
//! and waits for every target to clear that bit. A target (in the IPI
//! handler, or while itself waiting) flushes each request whose bit is set
//! in its own word, then clears the bit. Two CPUs shooting down at each
//! other at once, both with IF clear (a sender may hold an `IrqSpinLock`),
//! cannot take each other's IPI, so a waiting sender also serves its own
//! mailbox: neither waits on something the other cannot do. For the same
//! reason a CPU spinning on an `IrqSpinLock` (IF clear) polls its mailbox:
//! the holder may be a sender waiting for it.

use super::apic;
use super::percpu::{self, AREAS, MAX_CPUS};
use arch_x86_64::tlb::Shootdown;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// The shootdown IPI's vector.
pub const SHOOTDOWN_VECTOR: u32 = 0x41;
/// ICR low for a fixed IPI: delivery mode 000, physical destination,
/// level assert (bit 14; SDM Vol. 3A §11.6.1).
pub(super) const ICR_FIXED: u32 = 1 << 14;

/// Per sender: the address of its request while it waits (0 otherwise).
static REQ: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
/// Per target: bit `s` set while sender `s`'s request waits for it.
static PENDING: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// How long a sender waits for the acknowledgements (TSC ticks: seconds at
/// a few GHz, far beyond any flush).
const ACK_TIMEOUT: u64 = 10_000_000_000;

/// The hook: performs `req` on every other online CPU, returning once all
/// have (the local flush was done by `X86Tlb` before the call).
pub fn shoot(req: &Shootdown) {
    let online = super::smp::online();
    if online <= 1 {
        return;
    }
    // IF clear while the request is out: this CPU's ICR writes and its
    // mailbox bookkeeping are not interleaved with its own handler's.
    let _g = super::irq_lock::IrqGuard::new();
    let me = percpu::this_cpu();
    let s = me.id;
    REQ[s].store(req as *const Shootdown as usize, Ordering::Relaxed);
    let mut sent = 0;
    for (t, area) in AREAS.iter().enumerate().take(online) {
        if t == s {
            continue;
        }
        // Release: the target that sees the bit sees `REQ[s]`.
        PENDING[t].fetch_or(1 << s, Ordering::Release);
        let apic_id = area.apic_id.load(Ordering::Relaxed) as u32;
        apic::send(apic_id, ICR_FIXED | SHOOTDOWN_VECTOR);
        sent += 1;
    }
    me.ipis_sent.fetch_add(sent, Ordering::Relaxed);
    let t0 = super::cycles();
    for t in (0..online).filter(|&t| t != s) {
        // Acquire: the target's flush happened before it cleared the bit.
        while PENDING[t].load(Ordering::Acquire) & (1 << s) != 0 {
            // Serve requests aimed at this CPU: their senders may be
            // waiting here with IF clear too.
            serve(me.id);
            if super::cycles() - t0 > ACK_TIMEOUT {
                crate::kernel::kprint!(
                    "check failed: TLB shootdown: CPU {t} did not acknowledge CPU {s}'s IPI\n"
                );
                super::exit(1);
            }
            core::hint::spin_loop();
        }
    }
    REQ[s].store(0, Ordering::Relaxed);
}

/// Runs every request pending for CPU `me` on this CPU (IF clear).
fn serve(me: usize) {
    let mut bits = PENDING[me].load(Ordering::Acquire);
    while bits != 0 {
        let s = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        let p = REQ[s].load(Ordering::Relaxed) as *const Shootdown;
        // SAFETY: bit `s` is set, so sender `s` stored `REQ[s]` before
        // setting it (Release, paired with the Acquire load above) and is
        // still waiting for this CPU to clear it: the request it points at
        // lives on the sender's stack until then. Shootdown is `Copy`.
        let req = unsafe { *p };
        super::tlb::uncounted().flush_local(&req);
        // Release: the flush is done before the sender sees the bit clear.
        PENDING[me].fetch_and(!(1 << s), Ordering::Release);
        percpu::this_cpu()
            .ipis_received
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Serves this CPU's pending requests from a wait loop that runs with IF
/// clear (`IrqSpinLock::lock`'s spin).
pub fn poll() {
    let me = percpu::this_cpu().id;
    if PENDING[me].load(Ordering::Relaxed) != 0 {
        serve(me);
    }
}

/// The Rust side of the shootdown vector (`irq_entry.rs`), IF clear.
pub(super) extern "C" fn handle_ipi() {
    serve(percpu::this_cpu().id);
    apic::eoi();
}

/// (requests sent, requests served) by CPU `cpu`.
pub fn counts(cpu: usize) -> (u64, u64) {
    let a = &AREAS[cpu];
    (
        a.ipis_sent.load(Ordering::Relaxed),
        a.ipis_received.load(Ordering::Relaxed),
    )
}
