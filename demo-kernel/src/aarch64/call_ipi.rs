//! The IPI of `on_each_cpu` (`../call.rs`) on aarch64: a GIC SGI, taken
//! by the IRQ handler (`tick.rs`).

use core::sync::atomic::Ordering;

/// The call's SGI.
pub const SGI: u32 = 1;
/// How long a call's sender waits (counter ticks: 62.5 MHz on qemu
/// `virt`, so seconds).
pub const TIMEOUT: u64 = 1_000_000_000;

/// Sends the call SGI to CPU `cpu`.
pub fn send(cpu: usize) {
    let target = super::percpu::AREAS[cpu].gic_target.load(Ordering::Relaxed);
    super::gic::send_sgi(target, SGI);
}
