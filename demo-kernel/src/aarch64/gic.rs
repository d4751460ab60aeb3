//! The GICv2 of qemu `-M virt` (the TCG default): distributor at
//! 0x0800_0000, CPU interface at 0x0801_0000, both in the identity-mapped
//! device block. Register offsets and fields from the GICv2 architecture
//! specification (Arm IHI 0048B, 4.3 distributor and 4.4 CPU interface).
//!
//! No security extensions are visible at EL1 here, so every interrupt is
//! group 0 and, with `GICC_CTLR.FIQEn` clear, is signalled as IRQ.

use core::ptr::{read_volatile, write_volatile};

const GICD: usize = 0x0800_0000;
const GICC: usize = 0x0801_0000;

/// `GICD_CTLR`: bit 0 forwards group 0 interrupts to the CPU interfaces.
const GICD_CTLR: usize = 0x000;
/// `GICD_ISENABLER0`: SGIs and PPIs 0..31, banked per CPU.
const GICD_ISENABLER0: usize = 0x100;
/// `GICD_ITARGETSR0`: the targets of interrupts 0..3; for SGIs and PPIs
/// read-only, each byte the reading CPU's own interface bit (4.3.12).
const GICD_ITARGETSR0: usize = 0x800;
/// `GICD_SGIR`: writing `targets << 16 | id` (TargetListFilter 0) sends
/// SGI `id` to the CPU interfaces in `targets` (4.3.15).
const GICD_SGIR: usize = 0xf00;
/// `GICC_CTLR`: bit 0 signals group 0 interrupts to this CPU.
const GICC_CTLR: usize = 0x000;
/// `GICC_PMR`: interrupts with a priority value below it are signalled;
/// 0xff lets every priority through.
const GICC_PMR: usize = 0x004;
/// `GICC_IAR`: reading acknowledges the highest pending interrupt.
const GICC_IAR: usize = 0x00c;
/// `GICC_EOIR`: writing the IAR value back ends it.
const GICC_EOIR: usize = 0x010;

/// Interrupt ids 1020..1023 are special; 1023 is "spurious, nothing
/// pending" (IHI 0048B, special interrupt numbers).
pub const SPURIOUS: u32 = 1023;

fn write(addr: usize, v: u32) {
    // SAFETY: `addr` is a GIC register in the device block the boot map
    // identity-maps as Device-nGnRE; GIC registers are 32 bits wide.
    unsafe { write_volatile(addr as *mut u32, v) }
}

fn read(addr: usize) -> u32 {
    // SAFETY: as in `write`; reading IAR has the acknowledge side effect
    // the caller wants, the others none.
    unsafe { read_volatile(addr as *const u32) }
}

/// Turns the distributor on (once, on the boot CPU).
pub fn init_distributor() {
    write(GICD + GICD_CTLR, 1);
}

/// This CPU's interface: all priorities, signalling on, and the PPI `ppi`
/// and the SGI `sgi` enabled in this CPU's bank of `GICD_ISENABLER0`
/// (whether SGIs can be disabled at all is implementation defined).
/// Returns this CPU's interface bit, the target [`send_sgi`] takes.
pub fn init_cpu(ppi: u32, sgi: u32) -> u8 {
    debug_assert!((16..32).contains(&ppi) && sgi < 16);
    write(GICD + GICD_ISENABLER0, 1 << ppi | 1 << sgi);
    write(GICC + GICC_PMR, 0xff);
    write(GICC + GICC_CTLR, 1);
    read(GICD + GICD_ITARGETSR0) as u8
}

/// Sends SGI `sgi` to the CPU interfaces of `targets` (bits, as
/// [`init_cpu`] returns them).
pub fn send_sgi(targets: u8, sgi: u32) {
    // SAFETY: orders the sender's stores to normal memory (the call's
    // mailbox) before the write that raises the SGI, a device write (Arm
    // ARM DDI 0487 M.a, B2.3 "Definition of the Arm memory model":
    // normal and device accesses are ordered only by barriers); no memory
    // is touched.
    unsafe { core::arch::asm!("dsb ishst", options(nostack, preserves_flags)) };
    write(GICD + GICD_SGIR, u32::from(targets) << 16 | sgi);
}

/// Acknowledges the highest pending interrupt: the whole IAR value (the
/// id is its low 10 bits), for [`end`].
pub fn ack() -> u32 {
    read(GICC + GICC_IAR)
}

/// Ends the interrupt [`ack`] returned.
pub fn end(iar: u32) {
    write(GICC + GICC_EOIR, iar);
}
