//! The periodic tick on every CPU: the local APIC timer (SDM Vol. 3A
//! §11.5.4 "APIC Timer") in periodic mode; what the tick does (allocate
//! and free a few small objects) is `kernel/tick_batch.rs`, shared with
//! aarch64.

use super::{apic, irq, percpu};
use core::sync::atomic::Ordering::Relaxed;

/// The timer's vector (above the 32 exceptions; the APIC ignores vectors
/// below 16).
pub const TIMER_VECTOR: u32 = 0x40;
/// LVT timer register: vector, bit 16 mask (clear), bits 18:17 mode
/// (01 = periodic).
const LVT_TIMER: u32 = 0x320;
const PERIODIC: u32 = 1 << 17;
/// Initial-count and divide-configuration registers.
const INITIAL_COUNT: u32 = 0x380;
const DIVIDE: u32 = 0x3E0;
/// Divide by 16 (SDM Vol. 3A Figure 11-10: bits 3, 1:0 = 0, 11).
const DIVIDE_BY_16: u32 = 0b0011;
/// The timer counts at 1 GHz / divisor under qemu TCG (measured): 62.5 MHz
/// divided by 16, so this count gives 1 kHz, as the aarch64 tick.
const COUNT_1KHZ: u32 = 62_500;

/// This CPU's timer, then interrupts on: from here the tick can cut into
/// anything this CPU runs outside an IF-clear section. The caller holds no
/// lock.
pub fn start_this_cpu() {
    apic::write(DIVIDE, DIVIDE_BY_16);
    apic::write(LVT_TIMER, TIMER_VECTOR | PERIODIC);
    apic::write(INITIAL_COUNT, COUNT_1KHZ);
    irq::enable();
}

/// The Rust side of the timer vector (`irq_entry.rs`): IF clear (an
/// interrupt gate), on the interrupted stack.
pub(super) extern "C" fn handle_tick() {
    let me = percpu::this_cpu();
    me.ticks.fetch_add(1, Relaxed);
    let (done, bad) = crate::kernel::tick_batch::run(me.id);
    me.irq_bad.fetch_add(bad, Relaxed);
    me.irq_allocs.fetch_add(done, Relaxed);
    apic::eoi();
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
