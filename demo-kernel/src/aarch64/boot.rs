//! Bring-up at EL1: stack, FP/SIMD, vectors, BSS, then (in Rust) the boot
//! page tables through arch-aarch64's 4 KiB layout, MAIR/TCR/TTBR and the MMU.
//!
//! Boot tables: TTBR0 identity-maps the first GiB (flash, GIC, PL011, …) as
//! one Device-nGnRE block and RAM as Normal write-back 2 MiB blocks, the
//! image's blocks split into pages for W^X (wx.rs); TTBR1
//! starts as an empty table (every upper-half access faults) until vmalloc's
//! walker is installed there.

use super::{Layout, RAM_START};
use arch_aarch64::{Descriptor4K, MAIR_EL1_VALUE};
use arch_api::{MapFlags, PageTableEntry, PageTableLayout, PhysAddr, VirtAddr};
use core::arch::{asm, global_asm};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

global_asm!(
    r#"
    .section .text.boot, "ax"
    .global _start
_start:
    // qemu -M virt without virtualization / secure enters at EL1; anything
    // else would need an EL2 drop we do not implement: park.
    mrs     x1, CurrentEL
    lsr     x1, x1, #2
    cmp     x1, #1
    b.ne    9f
    ldr     x1, =__stack_top
    mov     sp, x1
    // TPIDR_EL1 = the boot CPU's per-CPU area (in .data, not cleared
    // below), whose fault-report stack is the linker script's.
    ldr     x1, ={area0}
    msr     tpidr_el1, x1
    ldr     x2, =__exception_stack_top
    str     x2, [x1, #{exc_stack_top}]
    // FP/SIMD: rustc emits SIMD for plain copies; without FPEN = 0b11 the
    // first one traps (and the vectors are not up yet).
    mov     x1, #(3 << 20)
    msr     cpacr_el1, x1
    isb
    ldr     x1, ={vectors}
    msr     vbar_el1, x1
    isb
    ldr     x1, =__bss_start
    ldr     x2, =__bss_end
1:  cmp     x1, x2
    b.hs    2f
    str     xzr, [x1], #8
    b       1b
2:  bl      {boot_main}
9:  wfe
    b       9b
    .ltorg
"#,
    vectors = sym super::vectors::demo_vectors,
    boot_main = sym boot_main,
    area0 = sym super::percpu::AREAS,
    exc_stack_top = const super::percpu::AREA_EXC_STACK_TOP,
);

/// The boot CPU's MMU registers, as it wrote them, for the secondaries:
/// MAIR_EL1, TCR_EL1, TTBR0_EL1, TTBR1_EL1, SCTLR_EL1 (the order
/// `secondary_entry` loads them in).
#[repr(C, align(64))]
pub(super) struct MmuRegs(pub [AtomicU64; 5]);

pub(super) static MMU_REGS: MmuRegs = MmuRegs([const { AtomicU64::new(0) }; 5]);

/// Cleans `[start, start + len)` from the data caches to the point of
/// coherency (`dc cvac` per line, the line size from CTR_EL0.DminLine), so
/// a CPU that reads it with its MMU and caches off (a secondary before its
/// MMU is on) sees what this CPU wrote through its caches (Arm ARM DDI
/// 0487 M.a, C5.3.25 "DC CVAC": clean by VA to the PoC; D7.5.9.2 "The
/// data cache maintenance instruction (DC)").
pub(super) fn clean_to_poc(start: u64, len: usize) {
    let ctr: u64;
    // SAFETY: reading CTR_EL0 has no side effects.
    unsafe { asm!("mrs {c}, ctr_el0", c = out(reg) ctr, options(nomem, nostack)) };
    let line = 4u64 << ((ctr >> 16) & 0xf);
    let mut a = start & !(line - 1);
    while a < start + len as u64 {
        // SAFETY: cleaning a line that is mapped (identity-mapped RAM)
        // writes back dirty data and changes no value.
        unsafe { asm!("dc cvac, {a}", a = in(reg) a, options(nostack)) };
        a += line;
    }
    // SAFETY: a barrier; the cleans complete before whatever comes next
    // (the CPU_ON call).
    unsafe { asm!("dsb sy", options(nostack)) };
}

/// One 4 KiB translation table, in BSS (zero = all entries invalid).
#[repr(C, align(4096))]
struct Table(UnsafeCell<[u64; 512]>);

// SAFETY: written only during single-threaded boot, before the MMU reads
// them; read by the MMU afterwards.
unsafe impl Sync for Table {}

impl Table {
    const fn new() -> Self {
        Self(UnsafeCell::new([0; 512]))
    }

    fn pa(&self) -> u64 {
        self.0.get() as u64
    }

    /// Stores entry `i`. Volatile: the MMU, not the compiler, reads it.
    fn set(&self, i: usize, e: Descriptor4K) {
        assert!(i < 512);
        // SAFETY: `i` is in bounds; the table is only written during boot
        // by this one CPU.
        unsafe { (self.0.get() as *mut u64).add(i).write_volatile(e.raw()) }
    }
}

static BOOT_L0: Table = Table::new();
static BOOT_L1: Table = Table::new();
static BOOT_L2_RAM: Table = Table::new();
/// Level-3 tables for the 2 MiB blocks holding the image (text, rodata and
/// data get their own permissions); two cover an image up to 2 MiB long at
/// any offset.
static BOOT_L3_IMAGE: [Table; 2] = [Table::new(), Table::new()];
/// The kernel's upper-half root (TTBR1_EL1), empty at boot: vmalloc and
/// the munmap case attach to it.
static KERNEL_TTBR1: Table = Table::new();

/// The TTBR0 root (identity map).
pub(super) fn ttbr0_root() -> u64 {
    BOOT_L0.pa()
}

/// The TTBR1 root (the upper half: vmalloc and the munmap case).
pub(super) fn ttbr1_root() -> u64 {
    KERNEL_TTBR1.pa()
}

/// Fills the boot tables: level indices from the layout, entries from
/// arch-aarch64's descriptor encoding.
fn build_identity_map() {
    let va = |a: u64| VirtAddr::new(a);
    BOOT_L0.set(
        Layout::index(va(0), 0),
        Descriptor4K::new_table(PhysAddr::new(BOOT_L1.pa())),
    );
    // 0..1 GiB: devices (PL011 at 0x0900_0000, GIC, flash), never executable.
    BOOT_L1.set(
        Layout::index(va(0), 1),
        Descriptor4K::new_leaf(
            PhysAddr::new(0),
            MapFlags::WRITE | MapFlags::GLOBAL | MapFlags::DEVICE,
            1,
        ),
    );
    // RAM: never-executable read/write blocks, the image's text read-only
    // executable and its rodata read-only (wx.rs).
    BOOT_L1.set(
        Layout::index(va(RAM_START), 1),
        Descriptor4K::new_table(PhysAddr::new(BOOT_L2_RAM.pa())),
    );
    let l3 = BOOT_L3_IMAGE.each_ref().map(Table::pa);
    let tables = [&BOOT_L2_RAM, &BOOT_L3_IMAGE[0], &BOOT_L3_IMAGE[1]];
    super::wx::map_ram(BOOT_L2_RAM.pa(), &l3, |table, i, e| {
        let t = tables
            .iter()
            .find(|t| t.pa() == table)
            .expect("a boot table");
        t.set(i, e);
    });
}

/// `TCR_EL1`: 48-bit VA in both halves (T0SZ = T1SZ = 16), 4 KiB granules
/// (TG0 = 0b00, TG1 = 0b10), walks write-back cacheable inner shareable,
/// IPS from the CPU's PARange (at most 48 bits), 8-bit ASIDs, no TBI.
fn tcr_value() -> u64 {
    let mmfr0: u64;
    // SAFETY: reading an ID register has no side effects.
    unsafe { asm!("mrs {v}, id_aa64mmfr0_el1", v = out(reg) mmfr0, options(nomem, nostack)) };
    let ips = (mmfr0 & 0xf).min(5);
    let t0 = 16 | (0b01 << 8) | (0b01 << 10) | (0b11 << 12);
    let t1 = (16 << 16) | (0b01 << 24) | (0b01 << 26) | (0b11 << 28) | (0b10 << 30);
    t0 | t1 | (ips << 32)
}

const SCTLR_M: u64 = 1 << 0;
const SCTLR_A: u64 = 1 << 1;
const SCTLR_C: u64 = 1 << 2;
const SCTLR_I: u64 = 1 << 12;
const SCTLR_WXN: u64 = 1 << 19;

/// Rust side of the boot: tables, MMU on, then the kernel.
extern "C" fn boot_main() -> ! {
    build_identity_map();
    super::wx::invalidate_bss_to_poc();
    let mair = MAIR_EL1_VALUE;
    let tcr = tcr_value();
    let (ttbr0, ttbr1) = (BOOT_L0.pa(), KERNEL_TTBR1.pa());
    for (slot, v) in MMU_REGS.0.iter().zip([mair, tcr, ttbr0, ttbr1]) {
        slot.store(v, Relaxed);
    }
    let sctlr: u64;
    // SAFETY: the tables are complete and identity-map the running image,
    // its stack and the UART, so execution continues at the same addresses
    // once translation is on. The TLB is invalidated (local, nothing else
    // runs) before the MMU is enabled so no reset-time entry survives.
    unsafe {
        asm!(
            "msr mair_el1, {mair}",
            "msr tcr_el1, {tcr}",
            "msr ttbr0_el1, {ttbr0}",
            "msr ttbr1_el1, {ttbr1}",
            "isb",
            "dsb ishst",
            "tlbi vmalle1",
            "dsb nsh",
            "isb",
            "mrs {s}, sctlr_el1",
            "orr {s}, {s}, {set}",
            "bic {s}, {s}, {clr}",
            "msr sctlr_el1, {s}",
            "isb",
            "mrs {s}, sctlr_el1",
            mair = in(reg) mair,
            tcr = in(reg) tcr,
            ttbr0 = in(reg) ttbr0,
            ttbr1 = in(reg) ttbr1,
            // WXN: the hardware treats every writable mapping as
            // execute-never (Arm ARM DDI 0487 M.a, D24.2.175 SCTLR_EL1, WXN
            // bit [19]; D8.4.1.2.3 "Stage 1 instruction execution using
            // Direct permissions"), a second line behind the tables' own
            // W^X.
            set = in(reg) SCTLR_M | SCTLR_C | SCTLR_I | SCTLR_WXN,
            clr = in(reg) SCTLR_A,
            s = out(reg) sctlr,
            options(nostack),
        );
    }
    MMU_REGS.0[4].store(sctlr, Relaxed);
    super::tlb::count_full();
    let wx = super::wx::check(ttbr0, ttbr1);
    crate::kernel::kprint!(
        "w^x: boot map leaves: {} text RX, {} read-only, {} RW never-executable, {} writable+executable; SCTLR_EL1.WXN {}\n",
        wx.rx,
        wx.ro,
        wx.rw_nx,
        wx.wx,
        (sctlr & SCTLR_WXN != 0) as u8,
    );
    if wx.wx != 0 {
        crate::kernel::kprint!("check failed: w^x: writable and executable kernel mappings\n");
        super::exit(1);
    }
    super::wx_test::run();
    crate::kernel::kernel_main()
}
