//! The aarch64 port: `qemu-system-aarch64 -M virt -cpu max`, booted at EL1
//! through `-kernel` (ELF at 0x4020_0000, the DTB below it), PL011 console, semihosting exit.
//!
//! `boot.rs` brings the CPU up (stack, FP/SIMD, BSS, boot tables, MMU),
//! `vectors.rs` reports exceptions, `tlb.rs` counts the `TLBI`s issued;
//! `percpu.rs` is the per-CPU area behind `TPIDR_EL1` (the kernel's
//! `CpuLocal`), `irq.rs` the IRQ mask and the IRQ-safe spinlock, `dtb.rs`
//! reads the CPUs and the PSCI conduit from the DTB, `smp.rs` starts the
//! secondaries, `../call.rs` runs `on_each_cpu` through a GIC SGI (`call_ipi.rs`).
//! The arch-module contract is in `main.rs`.
//!
//! Architecture rules are cited from the Arm ARM, DDI 0487 M.a (section
//! numbers move between revisions; each citation gives the title too).

mod boot;
#[path = "../call.rs"]
mod call;
mod call_ipi;
mod dtb;
mod gic;
mod irq;
#[path = "../irq_lock.rs"]
mod irq_lock;
mod percpu;
mod smp;
mod tick;
mod tlb;
#[cfg(feature = "no-shootdown")]
mod tlb_local;
mod tlb_range;
mod vectors;
mod wx;
#[path = "../wx_test.rs"]
mod wx_test;

use arch_api::PhysAddr;
use core::arch::asm;

pub use irq_lock::IrqSpinLock as Lock;
pub use percpu::PerCpu as Cpu;
pub use smp::{online, run_on_all, start_secondaries};

/// (timer ticks, allocations in the tick handler, tick objects found
/// overwritten) of CPU `cpu`; `None` where the port takes no interrupts.
pub fn tick_counts(cpu: usize) -> Option<(u64, u64, u64)> {
    Some(tick::counts(cpu))
}
pub use tlb::{Tlb, tlb, tlb_counts, va_flush};

/// Checks the `tlbi rvae1is` plan against the operands' decoding (see
/// `tlb_range::check_plan`): the ranges checked, or the first that failed.
pub fn check_va_flush_plan() -> Result<u64, (u64, u64)> {
    tlb_range::check_plan()
}

/// No shootdown IPIs: `tlbi vae1is` broadcasts in hardware.
pub fn ipi_counts(_cpu: usize) -> Option<(u64, u64)> {
    None
}

/// The kernel's `CpuLocal` value (`Platform::Cpu`).
pub const CPU: Cpu = percpu::PerCpu::ALL;

/// The `CpuLocal` over the CPUs online (`nr_cpus` = `online()`), for what
/// is made once they are all up.
pub fn cpus_online() -> Cpu {
    percpu::PerCpu::online()
}

/// The JSON `arch` key.
pub const NAME: &str = "aarch64";

/// The page-table layout of the live tables: 4 KiB granule, 48-bit VA.
pub type Layout = arch_aarch64::Aarch64Granule4K;

/// The vmalloc window: the bottom TiB of the TTBR1 half (Linux arm64 puts
/// vmalloc in the upper half too). The boot TTBR1 table is empty; vmalloc
/// maps into it (`kernel_root`).
pub const VMALLOC_START: u64 = 0xffff_8000_0000_0000;
/// End of the vmalloc window (exclusive).
pub const VMALLOC_END: u64 = 0xffff_8100_0000_0000;

/// RAM of `-M virt`: from 0x4000_0000, as much as `-m 256M` gives.
pub(crate) const RAM_START: u64 = 0x4000_0000;
/// End of RAM (exclusive). The xtask passes `-m 256M`.
pub(crate) const RAM_END: u64 = RAM_START + (256 << 20);

/// The PL011 UART of `-M virt`.
const UART_BASE: usize = 0x0900_0000;
/// PL011 data register.
const UART_DR: usize = 0x00;
/// PL011 flag register; bit 5 is TXFF (transmit FIFO full).
const UART_FR: usize = 0x18;
const UART_FR_TXFF: u32 = 1 << 5;

/// Writes `s` to the PL011, polling for FIFO space.
pub fn console_write(s: &str) {
    for b in s.bytes() {
        // SAFETY: the PL011's registers at 0x0900_0000 are identity-mapped as
        // device memory (or the MMU is off, which is device memory too);
        // reading FR and writing DR has no effect beyond the UART.
        unsafe {
            while core::ptr::read_volatile((UART_BASE + UART_FR) as *const u32) & UART_FR_TXFF != 0
            {
            }
            core::ptr::write_volatile((UART_BASE + UART_DR) as *mut u32, b as u32);
        }
    }
}

/// Semihosting `SYS_EXIT`.
const SYS_EXIT: u64 = 0x18;
/// `ADP_Stopped_ApplicationExit`: with it, the second word of the parameter
/// block is the exit status qemu returns to the host.
const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x20026;

/// Ends the run with `code` as qemu's exit status (semihosting must be on:
/// `-semihosting-config enable=on,target=native`).
pub fn exit(code: u32) -> ! {
    let block = [ADP_STOPPED_APPLICATION_EXIT, code as u64];
    // SAFETY: `hlt #0xf000` is the A64 semihosting trap; with semihosting on,
    // qemu reads the two-word block at x1 and exits. Without it the `hlt`
    // is an exception our vectors report, and we spin below.
    unsafe {
        asm!("hlt #0xf000", in("x0") SYS_EXIT, in("x1") block.as_ptr(), options(nostack));
    }
    loop {
        // SAFETY: waiting for an event has no effect on memory.
        unsafe { asm!("wfe", options(nomem, nostack)) }
    }
}

/// `cntvct_el0`, the virtual counter.
pub fn cycles() -> u64 {
    let v: u64;
    // SAFETY: reading the virtual counter is allowed at EL1 and has no side effects.
    unsafe { asm!("isb", "mrs {v}, cntvct_el0", v = out(reg) v, options(nomem, nostack)) };
    v
}

/// Physical frames the kernel may hand out: from the end of the image
/// (stacks included) to the end of RAM.
pub fn free_ram() -> (u64, u64) {
    unsafe extern "C" {
        static __kernel_end: u8;
    }
    // Only the symbol's address is taken; the linker script defines it.
    let end = core::ptr::addr_of!(__kernel_end) as u64;
    (end.next_multiple_of(4096), RAM_END)
}

/// The live root table translating `va`: TTBR1_EL1's for the upper half,
/// TTBR0_EL1's (the identity map) for the lower.
pub fn kernel_root(va: u64) -> PhysAddr {
    PhysAddr::new(if va >> 63 == 1 {
        boot::ttbr1_root()
    } else {
        boot::ttbr0_root()
    })
}
