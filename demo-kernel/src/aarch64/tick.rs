//! The periodic tick on every CPU: the EL1 virtual timer (PPI 27 on qemu
//! `virt`) through the GIC, and what the tick does — allocate and free a few
//! small objects through the global allocator (slub-core), on the same
//! caches the interrupted code may be in the middle of using. That is the
//! point: the unguarded tid fast path must survive an interrupt between its
//! loads and its CPU-local DW-CAS, and everything under `pin` must not see
//! the tick at all.

use super::{gic, percpu};
use alloc::alloc::{alloc, dealloc};
use core::alloc::Layout;
use core::arch::asm;
use core::sync::atomic::{AtomicPtr, Ordering::Relaxed};

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
    // CNTV_CTL_EL0 = ENABLE, IMASK clear (Arm ARM, DDI 0487, the Generic
    // Timer: CNTV_CTL_EL0). Writing TVAL also clears the condition of a fired
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
    gic::init_cpu(VTIMER_PPI);
    arm_timer();
    super::irq::enable();
}

/// Sizes the tick allocates (kmalloc classes the workloads use too).
const SIZES: [usize; 3] = [16, 64, 256];
/// Objects of each size a CPU's tick keeps until its next tick: freeing
/// and refilling a batch per tick sends the tick through slab refills and
/// partial-list moves, not just the per-CPU freelist, so it meets the
/// interrupted code's slow paths (the ones `pin` must shield) often.
const BATCH: usize = 16;

/// Per CPU, per size, the objects kept from the last tick (touched only
/// by that CPU's tick handler, with IRQs masked).
static STASH: [[[AtomicPtr<u8>; BATCH]; SIZES.len()]; percpu::MAX_CPUS] =
    [const { [const { [const { AtomicPtr::new(core::ptr::null_mut()) }; BATCH] }; SIZES.len()] };
        percpu::MAX_CPUS];

/// Frees last tick's batch of `size` (checking each still holds its
/// pattern) and allocates a new one; returns (allocations, bad objects).
fn churn(cpu: usize, k: usize, size: usize) -> (u64, u64) {
    let Ok(layout) = Layout::from_size_align(size, 8) else {
        return (0, 0);
    };
    let tag = (cpu as u8) << 4 | k as u8 | 0x80;
    let (mut done, mut bad) = (0, 0);
    for slot in &STASH[cpu][k] {
        let old = slot.swap(core::ptr::null_mut(), Relaxed);
        if !old.is_null() {
            // SAFETY: allocated by this CPU's previous tick with `layout`
            // and filled with `tag`; freed once here.
            unsafe {
                if core::slice::from_raw_parts(old, size)
                    .iter()
                    .any(|&b| b != tag)
                {
                    bad += 1;
                }
                dealloc(old, layout);
            }
        }
        // SAFETY: a non-zero-size layout; filled and kept until the next
        // tick on this CPU.
        let p = unsafe { alloc(layout) };
        if !p.is_null() {
            // SAFETY: a fresh object of `size` bytes.
            unsafe { p.write_bytes(tag, size) };
            slot.store(p, Relaxed);
            done += 1;
        }
    }
    (done, bad)
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
        let (mut done, mut bad) = (0, 0);
        for (k, size) in SIZES.into_iter().enumerate() {
            let (d, b) = churn(me.id, k, size);
            done += d;
            bad += b;
        }
        me.irq_bad.fetch_add(bad, Relaxed);
        me.irq_allocs.fetch_add(done, Relaxed);
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
