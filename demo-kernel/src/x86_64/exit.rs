//! Leaving qemu with a status: the `isa-debug-exit` device
//! (`-device isa-debug-exit,iobase=0xf4,iosize=0x04`). A write of `v` to its
//! port makes qemu exit with status `(v << 1) | 1`, so 0 (success) is seen by
//! the host as 1, 2 (panic) as 5, 3 (fault) as 7; `cargo xtask qemu` maps
//! them back. Without the device the write is ignored and the CPU halts
//! (interrupts are off, so for good).

use super::port::outl;

const DEBUG_EXIT_PORT: u16 = 0xf4;

/// Ends the run with `code` (0 success, 1 a check failed, 2 panic, 3 fault).
pub fn exit(code: u32) -> ! {
    // SAFETY: port 0xf4 is qemu's debug-exit device (or nothing); writing
    // it touches no memory.
    unsafe { outl(DEBUG_EXIT_PORT, code) };
    loop {
        // SAFETY: `cli; hlt` stops this CPU; nothing needs it any more.
        unsafe { core::arch::asm!("cli", "hlt", options(nomem, nostack)) };
    }
}
