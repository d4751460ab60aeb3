//! A minimal demo kernel: the workspace's memory-management crates on a real
//! (emulated) MMU, the example an OS project would copy.
//!
//! It boots on `qemu-system-aarch64 -M virt` (ELF at 0x4020_0000, semihosting
//! exit) and on `qemu-system-x86_64` (PVH entry, `isa-debug-exit`), builds its
//! own page tables through the arch crates' layouts, turns the MMU on and runs
//! the harness workloads (`kernel.rs`) with slub-core as the
//! `#[global_allocator]`, vmap-lazy managing a vmalloc window in the live
//! tables with real `tlbi vae1is` / `invlpg` flushes, and zap-walker zapping
//! a sparse range. `cargo xtask qemu aarch64|x86_64 [--fault-test]` builds and
//! runs it.
//!
//! On a hosted target this file compiles to a stub `main`, so the workspace's
//! host builds, tests and lints keep working.
//!
//! What an OS implements to embed the crates, walked through on this kernel's
//! glue (`frames.rs`, `tlb.rs`, `platform.rs`, `kernel_root`), with
//! its line count:
//! `EMBEDDING.md` at the workspace root. Below is only the contract between
//! this kernel's shared part and its two arch modules.
//!
//! # The arch-module contract
//!
//! `aarch64/mod.rs` and `x86_64/mod.rs` each provide, as `crate::arch`:
//!
//! * **Boot.** `_start` in `global_asm!`: a stack, BSS cleared, FP/SIMD
//!   enabled (aarch64: `CPACR_EL1.FPEN = 0b11; isb`; x86_64: CR0/CR4 for SSE),
//!   exception vectors / an IDT that report any fault with
//!   `console_write("fault: …")` (the exception class / vector, the faulting
//!   address, the PC) and call `exit(3)`; kernel page tables built through the
//!   arch crate's layout (`arch_aarch64::Aarch64Granule4K` /
//!   `arch_x86_64::X86_64Pml4`) identity-mapping RAM (normal, cacheable) and
//!   the devices (device memory); MMU (and caches) on; then
//!   `kernel::kernel_main() -> !`.
//! * `pub const NAME: &str`: `"aarch64"` / `"x86_64"` (the JSON `arch` key).
//! * `pub fn console_write(s: &str)`: polled UART (PL011 / 16550).
//! * `pub fn exit(code: u32) -> !`: 0 success, 1 a check failed, 2 panic,
//!   3 fault. (x86_64: `isa-debug-exit`, qemu exits `(code << 1) | 1`.)
//! * `pub type Layout`: the `arch_api::PageTableLayout` of the live tables.
//! * `pub type Tlb`: `arch_api::TlbFlush + Sync + Send + 'static` wrapping
//!   `Aarch64Tlb` / `X86Tlb`: it issues the real instructions and counts
//!   them; `pub fn tlb() -> Tlb` makes one (cheap, all share the counters).
//! * `pub fn tlb_counts() -> (u64, u64)`: (pages invalidated by VA — each
//!   by its own `tlbi vae1is` / `invlpg`, or inside a `tlbi rvae1is` —,
//!   full flushes — `tlbi vmalle1is` / CR3/CR4 or INVPCID —) since boot.
//! * `pub fn va_flush() -> (&'static str, u64, u64)`: how ranges are
//!   invalidated by VA (aarch64 with FEAT_TLBIRANGE: `tlbi rvae1is`, one
//!   instruction per range; else one instruction per page), and the
//!   (by-VA instructions, range instructions among them) since boot.
//!   `pub fn check_va_flush_plan() -> Result<u64, (u64, u64)>`: checks the
//!   range instructions' plan against their operands decoded by the
//!   manual's formulas (the ranges checked, or the first `(start, pages)`
//!   that failed): qemu flushes far more than a range TLBI names, so the
//!   stale-TLB checks cannot catch a wrong operand.
//! * `pub fn free_ram() -> (u64, u64)`: `[start, end)` physical, page
//!   aligned: the RAM the kernel may hand out (after the image, the stack and
//!   the boot tables). RAM is identity-mapped: a `PhysMap` offset of 0.
//! * `pub const VMALLOC_START: u64`, `pub const VMALLOC_END: u64`: an
//!   unmapped window, canonical, outside the identity map, translated by
//!   the live root `kernel_root` gives. The 1 TiB right after `VMALLOC_END`
//!   must be canonical and unused too: the sparse munmap case maps a few
//!   pages there through a walker attached to the same root.
//! * `pub fn kernel_root(va: u64) -> arch_api::PhysAddr`: the live root
//!   table translating `va`, as the kernel built it at boot (aarch64:
//!   TTBR1_EL1's table for the upper half, TTBR0_EL1's identity map for the
//!   lower; x86_64: CR3's PML4). vmap-lazy's `Vmalloc::attach` and
//!   zap-walker's `Walker::attach` map into it directly: nothing is copied
//!   between roots and no root is switched.
//! * `pub fn cycles() -> u64`: a free-running counter (`cntvct_el0` / `rdtsc`).
//!
//! * `pub type Cpu`, `pub const CPU: Cpu`: the `CpuLocal` (aarch64:
//!   `PerCpu` over `TPIDR_EL1`; x86_64: `PerCpu` over the GS base) with
//!   every CPU slot (8), for the kmalloc caches made before the other CPUs
//!   are up; `pub fn cpus_online() -> Cpu`: the same over the CPUs online
//!   (`nr_cpus` = `online()`), for what is made after bring-up (the
//!   vmallocs: their per-CPU vmap blocks and their shootdown counts, `cpus
//!   - 1` per flush, follow it);
//!   `pub type Lock`: the raw lock (IRQ-safe, counted per CPU).
//! * `pub fn start_secondaries() -> usize`, `pub fn online() -> usize`,
//!   `pub fn run_on_all(f: fn(usize))`: bring the other CPUs up (PSCI /
//!   INIT-SIPI-SIPI) and run `f(cpu)` on all of them at once.
//! * `pub fn ipi_counts(cpu: usize) -> Option<(u64, u64)>`: (TLB shootdown
//!   requests sent, served) of a CPU; `None` where flushes broadcast in
//!   hardware (aarch64).
//! * `pub fn tick_counts(cpu: usize) -> Option<(u64, u64, u64)>`: (timer
//!   ticks, allocations done in the tick handler, tick objects found
//!   overwritten) of a CPU; `None` where the port takes no interrupts.
//!   Every CPU ticks at 1 kHz from `start_secondaries` on (aarch64: GICv2,
//!   virtual timer PPI 27; x86_64: the local APIC timer); each tick frees
//!   its previous tick's 16 objects of 16, 64 and 256 bytes, checked, and
//!   kmallocs new ones.
//!
//! Both kernels run on every CPU qemu's `-smp` gives (aarch64: the DTB's
//! `/cpus`; x86_64: the ACPI MADT).
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(all(target_os = "none", target_arch = "aarch64"))]
#[path = "aarch64/mod.rs"]
mod arch;
#[cfg(all(target_os = "none", target_arch = "x86_64"))]
#[path = "x86_64/mod.rs"]
mod arch;

#[cfg(target_os = "none")]
mod frames;
#[cfg(target_os = "none")]
mod kernel;
#[cfg(target_os = "none")]
mod platform;

/// Reports the panic on the console and exits with status 2.
#[cfg(target_os = "none")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    use core::fmt::Write;
    let mut out = kernel::Console;
    let _ = writeln!(out, "panic: {info}");
    arch::exit(2)
}

#[cfg(not(target_os = "none"))]
fn main() {
    println!(
        "demo-kernel is a bare-metal demo: build it for aarch64-unknown-none or \
         x86_64-unknown-none and run it with `cargo xtask qemu aarch64|x86_64`"
    );
}
