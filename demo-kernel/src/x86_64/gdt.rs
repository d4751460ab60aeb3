//! The long-mode GDT and the TSS, for one thing only: a known-good stack for
//! the fault handler (IST 1). Without it a kernel stack overflow — a #PF on
//! the guard page — would push the exception frame onto the same unmapped
//! page, escalate to #DF and then to a triple fault: qemu resets (`-no-reboot`
//! exits) silently instead of printing the fault.
//!
//! Selectors: 0x08 64-bit code, 0x10 data, 0x18 the 16-byte TSS descriptor
//! (SDM Vol. 3A §7.2.3, Figure 7-4).

use core::arch::asm;
use core::cell::UnsafeCell;

/// The kernel code selector.
pub const KERNEL_CS: u16 = 0x08;
const KERNEL_DS: u16 = 0x10;
const TSS_SEL: u16 = 0x18;
/// The IST slot the fault handlers run on.
pub const FAULT_IST: u8 = 1;

/// The 64-bit TSS (SDM Vol. 3A Figure 8-11) as 26 dwords: RSP0-2 at dwords
/// 1..7, IST1-7 at 9..23, the I/O map base in the top half of dword 25.
#[repr(C, align(16))]
struct Tss([u32; 26]);

/// GDT then TSS, written once by [`init`] before either is loaded.
struct Tables {
    gdt: UnsafeCell<[u64; 5]>,
    tss: UnsafeCell<Tss>,
}

// SAFETY: written only by `init`, on the one CPU, before interrupts or other
// users exist; afterwards only the CPU reads them.
unsafe impl Sync for Tables {}

static TABLES: Tables = Tables {
    gdt: UnsafeCell::new([0; 5]),
    tss: UnsafeCell::new(Tss([0; 26])),
};

unsafe extern "C" {
    /// One past the fault stack (`link-x86_64.ld`).
    static __fault_stack_top: u8;
}

/// Loads the GDT and the TSS and reloads every segment register.
pub fn init() {
    let ist_top = (&raw const __fault_stack_top) as u64;
    let tss = TABLES.tss.get();
    let gdt = TABLES.gdt.get();
    // SAFETY: single-threaded boot; nothing else references TABLES yet.
    unsafe {
        let t = &mut (*tss).0;
        t[9] = ist_top as u32;
        t[10] = (ist_top >> 32) as u32;
        // No I/O permission bitmap: base past the limit (CPL 0 ignores it).
        t[25] = (104u32) << 16;
    }
    let base = tss as u64;
    let limit = (core::mem::size_of::<Tss>() - 1) as u64;
    // Available 64-bit TSS (type 9), present.
    let low = (limit & 0xffff)
        | ((base & 0xff_ffff) << 16)
        | (0x89 << 40)
        | (((limit >> 16) & 0xf) << 48)
        | (((base >> 24) & 0xff) << 56);
    let high = base >> 32;
    // SAFETY: as above.
    unsafe {
        *gdt = [0, 0x00af_9a00_0000_ffff, 0x00cf_9200_0000_ffff, low, high];
    }
    #[repr(C, packed)]
    struct Pointer {
        limit: u16,
        base: u64,
    }
    let ptr = Pointer {
        limit: (core::mem::size_of::<[u64; 5]>() - 1) as u16,
        base: gdt as u64,
    };
    // SAFETY: the GDT is static and valid (same code/data descriptors as the
    // boot GDT, so reloading CS/SS keeps the same flat segments); `retfq`
    // pops the RIP and CS just pushed; the TSS descriptor is available (not
    // busy) and describes a static TSS.
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
            tss = in(reg) u64::from(TSS_SEL),
            tmp = out(reg) _,
        );
    }
}
