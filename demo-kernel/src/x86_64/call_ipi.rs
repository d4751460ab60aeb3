//! The IPI of `on_each_cpu` (`../call.rs`) on x86_64: a fixed vector
//! through the local APIC, one above the TLB shootdown's.

use core::sync::atomic::Ordering;

/// The call IPI's vector.
pub const VECTOR: u32 = 0x42;
/// How long a call's sender waits (TSC ticks: seconds at a few GHz).
pub const TIMEOUT: u64 = 10_000_000_000;

/// Sends the call IPI to CPU `cpu` (IF clear: the ICR is written in two
/// steps).
pub fn send(cpu: usize) {
    let apic_id = super::percpu::AREAS[cpu].apic_id.load(Ordering::Relaxed);
    super::apic::send(apic_id as u32, super::shootdown::ICR_FIXED | VECTOR);
}

/// The Rust side of the call vector (`irq_entry.rs`), IF clear.
pub(super) extern "C" fn handle() {
    super::call::serve();
    super::apic::eoi();
}
