//! Starting the APs through INIT–SIPI–SIPI and handing them work.
//!
//! The firmware parks the APs in wait-for-SIPI after its own use of them,
//! so the boot CPU sends INIT (ICR 0x4500: INIT, level assert) and then
//! two STARTUP IPIs (0x4600 | vector) to each, as the SDM's MP
//! initialization protocol does (Vol. 3A §9.4.4.1 "Typical BSP
//! Initialization Sequence": INIT, 10 ms, SIPI, 200 µs, SIPI). A SIPI
//! starts the AP in real mode at CS:IP = vector << 8 : 0, i.e. physical
//! `vector << 12`, so the trampoline below is copied to [`TRAMPOLINE`]
//! (vector 8) at run time: the firmware has used low memory after the
//! image was loaded, so nothing there can be placed by the linker.
//!
//! The trampoline goes real mode → protected mode (its own GDT, copied with
//! it) → long mode on the boot tables of `boot.rs` (which identity-map the
//! first GiB without XD, so the low page it runs from is executable), and
//! far-jumps to `demo_ap_long64` in the kernel's text, which switches to
//! the kernel map, sets its stack from its per-CPU area and calls
//! [`ap_main`]. One AP starts at a time: [`AP_AREA`] is the hand-off.
//!
//! The APIC IDs come from the ACPI MADT (`acpi.rs`); without one the
//! kernel runs on the boot CPU alone.

use super::percpu::{self, AREA_STACK_TOP, AREAS, Area, MAX_CPUS};
use super::{apic, gdt, idt};
use core::arch::global_asm;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Where the trampoline runs: vector 8, below 1 MiB, in the low RAM of the
/// PVH memory map, which the kernel neither hands out nor uses.
const TRAMPOLINE: u64 = 0x8000;
const SIPI_VECTOR: u32 = (TRAMPOLINE >> 12) as u32;
const ICR_INIT: u32 = 0x4500;
const ICR_STARTUP: u32 = 0x4600;

global_asm!(
    // The trampoline, assembled for the address it is copied to: every
    // absolute reference inside it is `TRAMPOLINE + (label - start)`.
    r#"
    .section .rodata.ap_trampoline, "a"
    .balign 16
    .global demo_ap_trampoline
demo_ap_trampoline:
    .code16
    // The GDT pointer sits at offset 2 (a memory operand may not hold a
    // label difference): jump over it.
    .byte 0xeb, 0x06
    .word 31
    .long {tr} + (ap_tr_gdt - demo_ap_trampoline)
    cli
    cld
    xor ax, ax
    mov ds, ax
    lgdt [{tr} + 2]
    mov eax, cr0
    or eax, 1
    mov cr0, eax
    .byte 0x66, 0xea
    .long {tr} + (ap_tr_32 - demo_ap_trampoline)
    .word 0x08
    .code32
ap_tr_32:
    mov ax, 0x10
    mov ds, ax
    mov es, ax
    mov ss, ax
    mov eax, cr4
    or eax, 0x20
    mov cr4, eax
    mov eax, offset boot_pml4
    mov cr3, eax
    // EFER.LME | EFER.NXE and CR0.PG | CR0.WP | CR0.PE, as the boot CPU:
    // the kernel map loaded next sets XD (reserved, so a #PF, while NXE
    // is clear) and relies on WP for read-only text (Intel SDM Vol. 3A
    // §4.5, §4.6): the APs enter with the boot CPU's rights.
    mov ecx, 0xc0000080
    rdmsr
    or eax, 0x900
    wrmsr
    mov eax, cr0
    or eax, 0x80010001
    mov cr0, eax
    .byte 0xea
    .long demo_ap_long64
    .word 0x18
    .balign 8
ap_tr_gdt:
    .quad 0
    .quad 0x00cf9a000000ffff
    .quad 0x00cf92000000ffff
    .quad 0x00af9a000000ffff
    .global demo_ap_trampoline_end
demo_ap_trampoline_end:
    .code64
    "#,
    // Long mode, still on the boot tables: the kernel map (global pages on,
    // as the boot CPU has them), SSE as `boot.rs` sets it, the stack from
    // the per-CPU area, then Rust.
    r#"
    .section .text.ap_long64, "ax"
    .global demo_ap_long64
demo_ap_long64:
    mov rax, qword ptr [rip + {root}]
    mov cr3, rax
    mov rax, cr4
    or rax, 0x680
    mov cr4, rax
    mov rax, cr0
    and rax, -5
    or rax, 0x2
    mov cr0, rax
    mov rdi, qword ptr [rip + {area}]
    mov rsp, qword ptr [rdi + {stack_top}]
    xor ebp, ebp
    call {main}
2:
    hlt
    jmp 2b
    "#,
    tr = const TRAMPOLINE,
    root = sym super::paging::KERNEL_ROOT,
    area = sym AP_AREA,
    stack_top = const AREA_STACK_TOP,
    main = sym ap_main,
);

unsafe extern "C" {
    static demo_ap_trampoline: u8;
    static demo_ap_trampoline_end: u8;
}

/// The area of the AP being started (its address), read by
/// `demo_ap_long64`.
static AP_AREA: AtomicU64 = AtomicU64::new(0);

/// The MADT's APIC IDs, boot CPU's included, recorded at boot.
static APIC_IDS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static NR_IDS: AtomicUsize = AtomicUsize::new(0);

/// Records the CPUs the MADT lists (boot, on the boot tables).
///
/// # Safety
/// As `acpi::cpus`.
pub unsafe fn record_cpus(start_info: u64) {
    // SAFETY: per the caller.
    if let Some(c) = unsafe { super::acpi::cpus(start_info) } {
        for (slot, &id) in APIC_IDS.iter().zip(&c.ids[..c.nr]) {
            slot.store(u64::from(id), Ordering::Relaxed);
        }
        NR_IDS.store(c.nr, Ordering::Relaxed);
    }
}

/// Copies the trampoline to [`TRAMPOLINE`] (boot, after the kernel map).
pub fn install_trampoline() {
    let start = (&raw const demo_ap_trampoline) as u64;
    let len = (&raw const demo_ap_trampoline_end) as u64 - start;
    assert!(len <= 4096, "the AP trampoline is over a page");
    // SAFETY: [TRAMPOLINE, +len) is low RAM, identity-mapped writable by the
    // kernel map, owned by nobody else (below the image, not in free_ram);
    // the source is the image's read-only copy.
    unsafe {
        core::ptr::copy_nonoverlapping(start as *const u8, TRAMPOLINE as *mut u8, len as usize)
    };
}

/// CPUs online (the boot CPU included).
static ONLINE: AtomicUsize = AtomicUsize::new(1);

/// The work the APs run next (a `fn(usize)` as an address, 0: none) and its
/// generation; `DONE` counts the CPUs that finished it.
static WORK: AtomicUsize = AtomicUsize::new(0);
static WORK_GEN: AtomicU64 = AtomicU64::new(0);
static DONE: AtomicUsize = AtomicUsize::new(0);

/// CPUs online.
pub fn online() -> usize {
    ONLINE.load(Ordering::Acquire)
}

/// TSC ticks per second assumed for delays and timeouts: TCG's TSC runs at
/// the host's rate, a few GHz; timeouts are generous multiples.
const TSC_HZ: u64 = 3_000_000_000;

fn delay_us(us: u64) {
    let t0 = super::cycles();
    while super::cycles() - t0 < us * (TSC_HZ / 1_000_000) {
        core::hint::spin_loop();
    }
}

/// Starts every CPU the MADT lists; returns how many are online.
pub fn start_secondaries() -> usize {
    // The tick first: the boot CPU ticks even if it stays alone.
    super::tick::start_this_cpu();
    let me = apic::id();
    AREAS[0].apic_id.store(u64::from(me), Ordering::Relaxed);
    AREAS[0].online.store(true, Ordering::Release);
    let nr = NR_IDS.load(Ordering::Relaxed);
    if nr == 0 {
        crate::kernel::kprint!("smp: no ACPI MADT: one CPU\n");
        return 1;
    }
    let mut next = 1;
    for slot in &APIC_IDS[..nr] {
        let id = slot.load(Ordering::Relaxed) as u32;
        if id == me || next >= MAX_CPUS {
            continue;
        }
        let area = percpu::prepare(next, id);
        AP_AREA.store(area as *const Area as u64, Ordering::Release);
        apic::send(id, ICR_INIT);
        delay_us(10_000);
        apic::send(id, ICR_STARTUP | SIPI_VECTOR);
        delay_us(200);
        if !area.online.load(Ordering::Acquire) {
            apic::send(id, ICR_STARTUP | SIPI_VECTOR);
        }
        // Bounded: a CPU that never comes is reported, not waited for.
        let t0 = super::cycles();
        while !area.online.load(Ordering::Acquire) {
            if super::cycles() - t0 > 5 * TSC_HZ {
                crate::kernel::kprint!(
                    "check failed: smp: CPU {next} (APIC ID {id}) never came up\n"
                );
                super::exit(1);
            }
            core::hint::spin_loop();
        }
        next += 1;
    }
    ONLINE.store(next, Ordering::Release);
    let ids: [u64; MAX_CPUS] = core::array::from_fn(|i| APIC_IDS[i].load(Ordering::Relaxed));
    crate::kernel::kprint!(
        "smp: {next} CPUs online (INIT-SIPI-SIPI, trampoline at {TRAMPOLINE:#x}, APIC IDs {:?} from the MADT)\n",
        &ids[..nr]
    );
    next
}

/// An AP, in long mode on the kernel map and its own stack.
extern "C" fn ap_main(area: &'static Area) -> ! {
    percpu::init_this_cpu(area);
    gdt::load(area.id, area.fault_stack_top.load(Ordering::Relaxed));
    idt::load();
    apic::enable_this_cpu();
    super::tick::start_this_cpu();
    area.online.store(true, Ordering::Release);
    let mut seen = 0;
    loop {
        let g = WORK_GEN.load(Ordering::Acquire);
        if g == seen {
            // Sleep until the next interrupt (the 1 kHz tick at the
            // latest): spinning vCPUs would starve the ones doing work on
            // a small host.
            // SAFETY: IF is set (the tick started), so `hlt` returns at the
            // next interrupt; it touches no memory.
            unsafe { core::arch::asm!("hlt", options(nomem, nostack)) };
            continue;
        }
        seen = g;
        let f = WORK.load(Ordering::Acquire);
        if f != 0 {
            // SAFETY: `run_on_all` stores only `fn(usize)` pointers.
            let f: fn(usize) = unsafe { core::mem::transmute::<usize, fn(usize)>(f) };
            f(area.id);
        }
        DONE.fetch_add(1, Ordering::AcqRel);
    }
}

/// How long `run_on_all` waits for the other CPUs.
const RUN_TIMEOUT_S: u64 = 60;

/// Runs `f(cpu)` on every online CPU at once (this one included) and waits
/// for all of them.
pub fn run_on_all(f: fn(usize)) {
    let others = online() - 1;
    DONE.store(0, Ordering::Relaxed);
    WORK.store(f as usize, Ordering::Relaxed);
    WORK_GEN.fetch_add(1, Ordering::AcqRel);
    f(0);
    // Bounded: a CPU that stops answering is reported, not waited for.
    let t0 = super::cycles();
    while DONE.load(Ordering::Acquire) < others {
        if super::cycles() - t0 > RUN_TIMEOUT_S * TSC_HZ {
            crate::kernel::kprint!(
                "check failed: smp: {} of {others} CPUs finished their work within {RUN_TIMEOUT_S} s\n",
                DONE.load(Ordering::Acquire)
            );
            super::exit(1);
        }
        core::hint::spin_loop();
    }
}
