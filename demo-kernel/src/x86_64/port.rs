//! Port I/O: `in` / `out`, the only way to reach the 16550 and
//! `isa-debug-exit` (neither is memory-mapped on the PC).

use core::arch::asm;

/// Writes a byte to an I/O port.
///
/// # Safety
/// CPL 0 (or IOPL permitting), and writing `value` to `port` must not break
/// memory safety (true of the UART and the exit device; not of, e.g., a DMA
/// controller).
pub unsafe fn outb(port: u16, value: u8) {
    // SAFETY: per the caller. `out` touches no memory and no flags.
    unsafe {
        asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack, preserves_flags))
    }
}

/// Writes a 32-bit word to an I/O port.
///
/// # Safety
/// As [`outb`].
pub unsafe fn outl(port: u16, value: u32) {
    // SAFETY: per the caller. `out` touches no memory and no flags.
    unsafe {
        asm!("out dx, eax", in("dx") port, in("eax") value, options(nomem, nostack, preserves_flags))
    }
}

/// Reads a byte from an I/O port.
///
/// # Safety
/// As [`outb`] (a read may have device side effects too).
pub unsafe fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: per the caller. `in` touches no memory and no flags.
    unsafe {
        asm!("in al, dx", in("dx") port, out("al") v, options(nomem, nostack, preserves_flags))
    };
    v
}
