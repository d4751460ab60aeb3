//! The long-mode GDT and one TSS per CPU, for one thing only: a known-good
//! stack for the fault handler (IST 1) on every CPU. Without it a kernel
//! stack overflow — a #PF on the guard page — would push the exception
//! frame onto the same unmapped page, escalate to #DF and then to a triple
//! fault: qemu resets (`-no-reboot` exits) silently instead of printing the
//! fault.
//!
//! Selectors: 0x08 64-bit code, 0x10 data, then CPU `i`'s 16-byte TSS
//! descriptor at 0x18 + 16 i (SDM Vol. 3A §8.2.3, Figure 8-4). Each CPU
//! needs its own TSS: `ltr` marks the descriptor busy, and a second `ltr`
//! of a busy one is a #GP (SDM Vol. 2A, LTR), besides which each CPU's IST
//! must point at its own stack.

use super::percpu::MAX_CPUS;
use core::arch::asm;
use core::cell::UnsafeCell;

/// The kernel code selector.
pub const KERNEL_CS: u16 = 0x08;
const KERNEL_DS: u16 = 0x10;
const TSS_SEL0: u16 = 0x18;
/// The IST slot the fault handlers run on.
pub const FAULT_IST: u8 = 1;

/// The 64-bit TSS (SDM Vol. 3A Figure 8-11) as 26 dwords: RSP0-2 at dwords
/// 1..7, IST1-7 at 9..23, the I/O map base in the top half of dword 25.
#[repr(C, align(16))]
struct Tss([u32; 26]);

const GDT_LEN: usize = 3 + 2 * MAX_CPUS;

/// The GDT and the TSSs.
struct Tables {
    gdt: UnsafeCell<[u64; GDT_LEN]>,
    tss: [UnsafeCell<Tss>; MAX_CPUS],
}

// SAFETY: the GDT is written only by `init` on the boot CPU before any AP
// runs (the AP start publishes it with release/acquire), read-only
// afterwards; TSS `i` is written only by CPU `i` in `load`, before its `ltr`.
unsafe impl Sync for Tables {}

static TABLES: Tables = Tables {
    gdt: UnsafeCell::new([0; GDT_LEN]),
    tss: [const { UnsafeCell::new(Tss([0; 26])) }; MAX_CPUS],
};

/// Writes the GDT: code, data and every CPU's TSS descriptor. Boot CPU,
/// once, before [`load`] on any CPU.
pub fn init() {
    let gdt = TABLES.gdt.get();
    // SAFETY: the boot CPU, before any AP runs and before any `lgdt` of
    // this table: nothing else references it.
    let g = unsafe { &mut *gdt };
    g[0] = 0;
    g[1] = 0x00af_9a00_0000_ffff;
    g[2] = 0x00cf_9200_0000_ffff;
    for (cpu, tss) in TABLES.tss.iter().enumerate() {
        let base = tss.get() as u64;
        let limit = (core::mem::size_of::<Tss>() - 1) as u64;
        // Available 64-bit TSS (type 9), present.
        g[3 + 2 * cpu] = (limit & 0xffff)
            | ((base & 0xff_ffff) << 16)
            | (0x89 << 40)
            | (((limit >> 16) & 0xf) << 48)
            | (((base >> 24) & 0xff) << 56);
        g[4 + 2 * cpu] = base >> 32;
    }
}

/// On CPU `cpu`: points its TSS's IST 1 at `ist_top`, loads the GDT,
/// reloads every segment register and loads its TSS. After [`init`].
pub fn load(cpu: usize, ist_top: u64) {
    let tss = TABLES.tss[cpu].get();
    // SAFETY: TSS `cpu` belongs to this CPU, which has not loaded it yet.
    unsafe {
        let t = &mut (*tss).0;
        t[9] = ist_top as u32;
        t[10] = (ist_top >> 32) as u32;
        // No I/O permission bitmap: base past the limit (CPL 0 ignores it).
        t[25] = (104u32) << 16;
    }
    let gdt = TABLES.gdt.get();
    #[repr(C, packed)]
    struct Pointer {
        limit: u16,
        base: u64,
    }
    let ptr = Pointer {
        limit: (core::mem::size_of::<[u64; GDT_LEN]>() - 1) as u16,
        base: gdt as u64,
    };
    let tss_sel = TSS_SEL0 + 16 * cpu as u16;
    // SAFETY: the GDT is static and valid (same code/data descriptors as the
    // boot GDT, so reloading CS/SS keeps the same flat segments); `retfq`
    // pops the RIP and CS just pushed; the TSS descriptor is available (not
    // busy: each CPU loads its own once) and describes a static TSS. GS is
    // not reloaded: a selector load would replace the per-CPU GS base.
    unsafe {
        asm!(
            "lgdt [{ptr}]",
            "push {cs}",
            "lea {tmp}, [rip + 2f]",
            "push {tmp}",
            "retfq",
            "2:",
            "mov ds, {ds:x}",
            "mov es, {ds:x}",
            "mov ss, {ds:x}",
            "ltr {tss:x}",
            ptr = in(reg) &ptr,
            cs = in(reg) u64::from(KERNEL_CS),
            ds = in(reg) u64::from(KERNEL_DS),
            tss = in(reg) u64::from(tss_sel),
            tmp = out(reg) _,
        );
    }
}
