//! `crate::arch` on x86_64: qemu `-kernel` via the PVH entry, 4-level paging
//! through `arch_x86_64::X86_64Pml4`, COM1 console, `isa-debug-exit`.
//!
//! Boot order (`boot.rs` → [`x86_64_start`]): 32-bit PVH entry, boot tables,
//! long mode, then in Rust the GS base (`percpu.rs`), the console, GDT/TSS
//! (a fault stack per CPU), IDT, the memory map and the ACPI MADT's CPUs
//! from the PVH start info, the kernel's own page tables (`paging.rs`), the
//! local APIC page and the AP trampoline, the TLB probe and its self-test
//! (`tlb_check.rs`: a real failure exits 1 before any workload), and
//! [`crate::kernel::kernel_main`], which starts the APs and the ticks
//! (`smp::start_secondaries`).
//!
//! Run it with
//! `qemu-system-x86_64 -kernel FILE -device isa-debug-exit,iobase=0xf4,iosize=0x04
//! -serial stdio -display none -no-reboot -m 256M` (the default `qemu64` CPU:
//! no INVPCID, so full flushes toggle CR4.PGE). qemu exits with
//! `(code << 1) | 1`.
//!
//! The image is linked at 2 MiB physical by `link-x86_64.ld`, as a
//! fixed-address `ET_EXEC`: `build.rs` passes `-T link-x86_64.ld` and
//! `--no-pie` (the target's default is static-PIE, and neither the 32-bit
//! entry's absolute addresses nor unapplied dynamic relocations would work).
//! Nothing else is needed: the target is soft-float (`-sse,+soft-float`),
//! code model `kernel`, which a 2 MiB link address satisfies.
//!
//! Files: `boot.rs` (PVH note, 32 → 64-bit), `gdt.rs` (GDT, per-CPU TSS
//! and fault stack), `idt.rs` (exception stubs, fault report, device
//! gates), `pvh.rs` (start info), `acpi.rs` (MADT), `paging.rs` (kernel
//! map), `percpu.rs` (GS base, `PerCpu`), `irq.rs` (IF guard,
//! `IrqSpinLock`), `apic.rs` (xAPIC), `smp.rs` (INIT–SIPI–SIPI, trampoline,
//! `run_on_all`), `irq_entry.rs` (interrupt stubs), `tick.rs` (APIC timer),
//! `shootdown.rs` (the TLB shootdown IPI), `../call.rs` (`on_each_cpu`'s
//! mailboxes, shared with aarch64) and `call_ipi.rs` (its IPI), `tlb.rs` (counted `X86Tlb`),
//! `tlb_check.rs` (its boot self-test), `serial.rs`, `exit.rs`, `port.rs`.
//!
//! Manual citations ("SDM") are to the Intel 64 and IA-32 Architectures
//! Software Developer's Manual, order number 325462, in the editions that
//! have the User Interrupts chapter as Vol. 3A chapter 7: interrupts and
//! exceptions are chapter 6, task management 8, multiple-processor
//! management 9, the APIC 11. Older editions number the chapters after 6 one
//! lower (task management 7, the APIC 10).

mod acpi;
mod apic;
mod boot;
#[path = "../call.rs"]
mod call;
mod call_ipi;
mod exit;
mod gdt;
mod idt;
mod irq;
mod irq_entry;
#[path = "../irq_lock.rs"]
mod irq_lock;
mod paging;
mod percpu;
mod port;
mod pvh;
mod serial;
mod shootdown;
mod smp;
mod tick;
mod tlb;
mod tlb_check;
mod wx_check;
#[path = "../wx_test.rs"]
mod wx_test;

use arch_api::PhysAddr;
use core::fmt::Write;
use core::sync::atomic::Ordering;

pub use exit::exit;
pub use tlb::{Tlb, tlb};

pub use irq_lock::IrqSpinLock as Lock;
pub use percpu::PerCpu as Cpu;

/// The kernel's `CpuLocal` value (`Platform::Cpu`).
pub const CPU: Cpu = percpu::PerCpu::ALL;

/// The `CpuLocal` over the CPUs online (`nr_cpus` = `online()`), for what
/// is made once they are all up.
pub fn cpus_online() -> Cpu {
    percpu::PerCpu::online()
}

pub use smp::{online, run_on_all, start_secondaries};

/// (timer ticks, allocations in the tick handler, tick objects found
/// overwritten) of CPU `cpu`.
pub fn tick_counts(cpu: usize) -> Option<(u64, u64, u64)> {
    Some(tick::counts(cpu))
}

/// (TLB shootdown requests sent, served) of CPU `cpu`; `None` where the
/// port broadcasts its flushes in hardware.
pub fn ipi_counts(cpu: usize) -> Option<(u64, u64)> {
    Some(shootdown::counts(cpu))
}

/// The JSON `arch` key.
pub const NAME: &str = "x86_64";

/// The layout of the live tables.
pub type Layout = arch_x86_64::X86_64Pml4;

/// The vmalloc window: Linux's 4-level `VMALLOC_START`
/// (`0xffff_c900_0000_0000`, PML4 slot 402) and 32 TiB (`VMALLOC_SIZE_TB`),
/// far from the identity map in PML4 slot 0.
pub const VMALLOC_START: u64 = 0xffff_c900_0000_0000;
/// One past the vmalloc window (PML4 slots 402..466). The 1 TiB after it
/// (slots 466..468, up to `0xffff_ea00_0000_0000`) is canonical and unused,
/// for the sparse munmap case; the boot TLB self-test uses slot 510.
pub const VMALLOC_END: u64 = VMALLOC_START + (32 << 40);

/// Writes `s` to COM1.
pub fn console_write(s: &str) {
    serial::write(s);
}

/// (`invlpg` issued, full flushes issued) since boot.
pub fn tlb_counts() -> (u64, u64) {
    tlb::counts()
}

/// How ranges are invalidated by VA, and the (by-VA instructions, range
/// instructions among them) since boot: x86_64 has no range form, one
/// `invlpg` per page.
pub fn va_flush() -> (&'static str, u64, u64) {
    ("invlpg per page", tlb::counts().0, 0)
}

/// Nothing to check: one `invlpg` per page (see aarch64's).
pub fn check_va_flush_plan() -> Result<u64, (u64, u64)> {
    Ok(0)
}

/// `[start, end)` physical, page aligned: the RAM after the image, its
/// stacks and the kernel page tables, up to the end of that RAM range in the
/// PVH memory map.
pub fn free_ram() -> (u64, u64) {
    (
        paging::FREE_START.load(Ordering::Relaxed),
        paging::FREE_END.load(Ordering::Relaxed),
    )
}

/// The live root table translating `va`: the kernel's own PML4 (what CR3
/// holds), for both halves.
pub fn kernel_root(_va: u64) -> PhysAddr {
    PhysAddr::new(paging::KERNEL_ROOT.load(Ordering::Relaxed))
}

/// The time-stamp counter.
pub fn cycles() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: RDTSC reads a counter (CR4.TSD is clear: allowed at any CPL).
    unsafe {
        core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags))
    };
    (u64::from(hi) << 32) | u64::from(lo)
}

/// `core::fmt::Write` to COM1, for this module's own messages.
struct Serial;

impl Write for Serial {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        serial::write(s);
        Ok(())
    }
}

/// Rust's entry, from `boot.rs`, in 64-bit mode on the boot tables with
/// `start_info` = the `hvm_start_info` physical address.
extern "C" fn x86_64_start(start_info: u32) -> ! {
    unsafe extern "C" {
        /// One past the boot CPU's fault stack (`link-x86_64.ld`).
        static __fault_stack_top: u8;
    }
    // GS first: everything after may read this CPU's area.
    percpu::init_this_cpu(&percpu::AREAS[0]);
    serial::init();
    gdt::init();
    gdt::load(0, (&raw const __fault_stack_top) as u64);
    idt::init();
    // SAFETY: the boot tables identity-map the first GiB, which holds the
    // start info qemu just wrote; nothing has touched it.
    let ram = unsafe { pvh::ram_map(u64::from(start_info)) };
    // SAFETY: the start info and the ACPI tables below it are still
    // identity-mapped by the boot tables.
    unsafe { smp::record_cpus(u64::from(start_info)) };
    // SAFETY: boot, once, on the boot tables, image at its link address.
    unsafe { paging::init(&ram) };
    let wx = wx_check::run();
    let _ = writeln!(
        Serial,
        "w^x: kernel map leaves: {} text RX, {} read-only, {} RW no-execute, {} writable+executable; CR0.WP {}, EFER.NXE {}",
        wx.rx,
        wx.ro,
        wx.rw_nx,
        wx.wx,
        u8::from(wx.cr0_wp),
        u8::from(wx.efer_nxe),
    );
    if !wx.ok() {
        let _ = writeln!(
            Serial,
            "check failed: w^x: the kernel map or CR0.WP/EFER.NXE"
        );
        exit(1);
    }
    wx_test::run();
    apic::init();
    smp::install_trampoline();
    tlb::init();
    let check = tlb_check::run();
    let (free_start, free_end) = free_ram();
    let _ = writeln!(
        Serial,
        "x86_64: PVH boot, kernel PML4 at {:#x} ({} table pages), RAM map from {}, free RAM [{:#x}, {:#x}), full flush by {:?}",
        kernel_root(0).as_u64(),
        paging::TABLE_PAGES.load(Ordering::Relaxed),
        if ram.from_start_info {
            "start info"
        } else {
            "fallback"
        },
        free_start,
        free_end,
        tlb().full_flush_method(),
    );
    let _ = writeln!(
        Serial,
        "x86_64: TLB self-test: {} of 3 flush methods replaced a stale global translation (stale before the flush: {}/3; a CR3 reload kept it: {})",
        check.failed.iter().filter(|f| f.is_none()).count(),
        check.stale_seen,
        check.cr3_kept_global,
    );
    if let Some(name) = check.failed.iter().flatten().next() {
        let _ = writeln!(
            Serial,
            "check failed: x86_64 TLB self-test: {name} left the stale translation"
        );
        exit(1);
    }
    crate::kernel::kernel_main()
}
