//! The console: the PC's first 16550 UART (COM1, I/O ports 0x3f8..0x3ff),
//! polled, 115200 8N1. qemu's `-serial stdio` connects it to the host.

use super::port::{inb, outb};
use core::sync::atomic::{AtomicBool, Ordering};

const COM1: u16 = 0x3f8;
/// Register offsets (the 16550 data sheet; DLAB = LCR bit 7 selects the
/// divisor latch at offsets 0 and 1).
const THR: u16 = 0; // transmit holding (write), divisor low with DLAB
const IER: u16 = 1; // interrupt enable, divisor high with DLAB
const FCR: u16 = 2; // FIFO control
const LCR: u16 = 3; // line control
const MCR: u16 = 4; // modem control
const LSR: u16 = 5; // line status
const LSR_THRE: u8 = 1 << 5; // transmit holding register empty

static READY: AtomicBool = AtomicBool::new(false);

/// Programs the UART. Called once, first thing in 64-bit mode, so the fault
/// handler can always print.
pub fn init() {
    // SAFETY: COM1's registers are UART registers, not memory; we are at
    // CPL 0 and the only code driving this UART.
    unsafe {
        outb(COM1 + IER, 0x00); // polled: no UART interrupts
        outb(COM1 + LCR, 0x80); // DLAB on
        outb(COM1 + THR, 0x01); // divisor 1: 115200 baud
        outb(COM1 + IER, 0x00);
        outb(COM1 + LCR, 0x03); // DLAB off, 8 data bits, no parity, 1 stop
        outb(COM1 + FCR, 0xc7); // FIFOs on and cleared
        outb(COM1 + MCR, 0x03); // DTR, RTS
    }
    READY.store(true, Ordering::Relaxed);
}

fn put(byte: u8) {
    // SAFETY: reading LSR and writing THR of an initialised 16550 have no
    // effect beyond the UART.
    unsafe {
        while inb(COM1 + LSR) & LSR_THRE == 0 {
            core::hint::spin_loop();
        }
        outb(COM1 + THR, byte);
    }
}

/// Writes `s`, turning `\n` into `\r\n` for terminals.
pub fn write(s: &str) {
    if !READY.load(Ordering::Relaxed) {
        init();
    }
    for b in s.bytes() {
        if b == b'\n' {
            put(b'\r');
        }
        put(b);
    }
}
