//! The local APIC in xAPIC mode (SDM Vol. 3A ch. 11 "Advanced Programmable
//! Interrupt Controller"): its page at 0xFEE0_0000 mapped uncached in the
//! kernel map, registers read and written 32 bits at a time (SDM Vol. 3A
//! §11.4.1: wider or narrower accesses are undefined), IPIs through the
//! ICR.

use arch_api::{MapFlags, PageTableEntry, PhysAddr, VirtAddr};
use arch_x86_64::Pml4Entry;
use core::sync::atomic::{AtomicBool, Ordering};

/// The default xAPIC base (SDM Vol. 3A §11.4.1; qemu keeps it).
const BASE: u64 = 0xFEE0_0000;
/// Local APIC ID register: the ID in bits 31:24.
const ID: u32 = 0x20;
/// Spurious-interrupt vector register: bit 8 enables the APIC.
const SVR: u32 = 0xF0;
/// Interrupt command register, low and high halves.
const ICR_LOW: u32 = 0x300;
const ICR_HIGH: u32 = 0x310;
/// ICR low: delivery status (send pending), bit 12.
const ICR_PENDING: u32 = 1 << 12;

static MAPPED: AtomicBool = AtomicBool::new(false);

/// Maps the APIC page (boot CPU, once, while `paging::kernel_pte` may still
/// take table frames) and enables this CPU's APIC.
pub fn init() {
    let pte = super::paging::kernel_pte(VirtAddr::new(BASE));
    // PCD|PWT (`DEVICE`): the SDM (Vol. 3A §11.4.1) requires the APIC
    // registers be mapped strong uncacheable. No invalidation: the entry
    // was not present, and the TLBs cache no translation whose P flag is 0
    // (SDM Vol. 3A §4.10.2.3).
    let flags = MapFlags::WRITE | MapFlags::DEVICE | MapFlags::GLOBAL;
    // SAFETY: `pte` is the kernel map's (not yet present) entry for BASE,
    // which maps nothing else; the APIC page is MMIO, not RAM.
    unsafe { pte.write(Pml4Entry::new_leaf(PhysAddr::new(BASE), flags, 3).raw()) };
    MAPPED.store(true, Ordering::Release);
    mask_8259();
    enable_this_cpu();
}

/// Masks every line of the legacy 8259A pair (OCW1, all bits set, to the
/// data ports 0x21 and 0xA1). The firmware leaves them programmed to
/// vectors 8..15 with the PIT on line 0: once IF is set, its interrupts
/// would arrive on the #DF vector. Interrupts here come from the local
/// APICs only.
fn mask_8259() {
    // SAFETY: writes to the two PICs' mask registers; they affect nothing
    // but which legacy IRQ lines the PICs forward, and no driver uses them.
    unsafe {
        super::port::outb(0x21, 0xFF);
        super::port::outb(0xA1, 0xFF);
    }
}

pub fn read(reg: u32) -> u32 {
    debug_assert!(MAPPED.load(Ordering::Relaxed));
    // SAFETY: the APIC page is mapped uncached (`init`), a 32-bit aligned
    // read of one of its registers.
    unsafe { core::ptr::read_volatile((BASE + u64::from(reg)) as *const u32) }
}

pub fn write(reg: u32, v: u32) {
    // SAFETY: as `read`; the callers write documented register values.
    unsafe { core::ptr::write_volatile((BASE + u64::from(reg)) as *mut u32, v) }
}

/// End-of-interrupt register: a write of 0 retires the interrupt being
/// serviced (SDM Vol. 3A §11.8.5).
const EOI: u32 = 0xB0;

/// Signals the end of the interrupt being handled.
pub fn eoi() {
    write(EOI, 0);
}

/// The spurious-interrupt vector (SVR bits 7:0).
pub const SPURIOUS_VECTOR: u32 = 0xFF;

/// Software-enables this CPU's APIC (SVR bit 8, spurious vector 0xFF).
pub fn enable_this_cpu() {
    write(SVR, (1 << 8) | SPURIOUS_VECTOR);
}

/// This CPU's APIC ID.
pub fn id() -> u32 {
    read(ID) >> 24
}

/// Sends the ICR command `low` to APIC ID `dest` and waits until the APIC
/// accepted it (delivery status idle).
pub fn send(dest: u32, low: u32) {
    write(ICR_HIGH, dest << 24);
    write(ICR_LOW, low);
    while read(ICR_LOW) & ICR_PENDING != 0 {
        core::hint::spin_loop();
    }
}
