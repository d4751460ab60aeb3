//! The IDT: every architectural exception (vectors 0..31) reports itself
//! and ends the run. A fault is a failure in this kernel: nothing is demand
//! paged, so there is nothing to recover.
//!
//! Each vector has a stub (`global_asm!` below) that pushes a dummy error
//! code when the CPU does not push one (SDM Vol. 3A §6.13: only #DF, #TS,
//! #NP, #SS, #GP, #PF, #AC, #CP, #VC, #SX push one) and the vector number,
//! so the common path sees one [`FaultFrame`] shape. All of them are
//! interrupt gates on IST 1 (`gdt.rs`), so even a stack overflow is
//! reported.

use super::gdt::{FAULT_IST, KERNEL_CS};
use core::arch::{asm, global_asm};
use core::cell::UnsafeCell;
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering};

const VECTORS: usize = 32;

/// What the stubs and the CPU left on the fault stack, lowest address first.
#[repr(C)]
#[derive(Debug)]
struct FaultFrame {
    vector: u64,
    error: u64,
    rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}

global_asm!(
    r#"
    .macro FAULT_NOERR n
    .balign 16
fault_stub_\n:
    push 0
    push \n
    jmp fault_common
    .endm
    .macro FAULT_ERR n
    .balign 16
fault_stub_\n:
    push \n
    jmp fault_common
    .endm

    .section .text.fault_stubs, "ax"
    FAULT_NOERR 0
    FAULT_NOERR 1
    FAULT_NOERR 2
    FAULT_NOERR 3
    FAULT_NOERR 4
    FAULT_NOERR 5
    FAULT_NOERR 6
    FAULT_NOERR 7
    FAULT_ERR 8
    FAULT_NOERR 9
    FAULT_ERR 10
    FAULT_ERR 11
    FAULT_ERR 12
    FAULT_ERR 13
    FAULT_ERR 14
    FAULT_NOERR 15
    FAULT_NOERR 16
    FAULT_ERR 17
    FAULT_NOERR 18
    FAULT_NOERR 19
    FAULT_NOERR 20
    FAULT_ERR 21
    FAULT_NOERR 22
    FAULT_NOERR 23
    FAULT_NOERR 24
    FAULT_NOERR 25
    FAULT_NOERR 26
    FAULT_NOERR 27
    FAULT_NOERR 28
    FAULT_ERR 29
    FAULT_ERR 30
    FAULT_NOERR 31

fault_common:
    mov rdi, rsp
    and rsp, -16
    call {report}
    ud2

    .section .rodata.fault_stubs, "a"
    .balign 8
    .global x86_64_fault_stubs
x86_64_fault_stubs:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .quad fault_stub_\n
    .endr
    "#,
    report = sym report,
);

unsafe extern "C" {
    /// The stub addresses, by vector (above).
    static x86_64_fault_stubs: [u64; VECTORS];
}

/// Gates: the 32 exceptions, and the device vectors up to 0xFF (spurious).
const GATES: usize = 256;

/// The IDT, written once by [`init`].
struct Idt(UnsafeCell<[[u64; 2]; GATES]>);

// SAFETY: written only by `init` on the boot CPU before any CPU loads it
// (and before any AP runs); afterwards only read, by the CPUs.
unsafe impl Sync for Idt {}

static IDT: Idt = Idt(UnsafeCell::new([[0; 2]; GATES]));

/// Fills the IDT (boot CPU, once, before any CPU loads it) and loads it (SDM Vol. 3A §6.14.1, Figure 6-8: 64-bit
/// interrupt gate, type 0xE, present, DPL 0).
pub fn init() {
    let idt = IDT.0.get();
    // SAFETY: a static array of plain addresses from `global_asm!` above.
    let stubs = unsafe { &x86_64_fault_stubs };
    // SAFETY: boot, one CPU, the IDT is not loaded yet: nobody else reads or
    // writes it.
    let gates = unsafe { &mut *idt };
    for (gate, &handler) in gates.iter_mut().zip(stubs) {
        *gate = interrupt_gate(handler, FAULT_IST);
    }
    // Device interrupts on the interrupted stack (IST 0): they nest in
    // ordinary code, never in a fault.
    use super::irq_entry::{demo_irq_call, demo_irq_shootdown, demo_irq_spurious, demo_irq_timer};
    gates[super::tick::TIMER_VECTOR as usize] =
        interrupt_gate(demo_irq_timer as *const () as u64, 0);
    gates[super::shootdown::SHOOTDOWN_VECTOR as usize] =
        interrupt_gate(demo_irq_shootdown as *const () as u64, 0);
    gates[super::call_ipi::VECTOR as usize] = interrupt_gate(demo_irq_call as *const () as u64, 0);
    gates[super::apic::SPURIOUS_VECTOR as usize] =
        interrupt_gate(demo_irq_spurious as *const () as u64, 0);
    load();
}

/// Loads the IDT [`init`] filled on this CPU (an AP).
pub fn load() {
    #[repr(C, packed)]
    struct Pointer {
        limit: u16,
        base: u64,
    }
    let ptr = Pointer {
        limit: (core::mem::size_of::<[[u64; 2]; GATES]>() - 1) as u16,
        base: IDT.0.get() as u64,
    };
    // SAFETY: `ptr` describes a static, fully initialised IDT whose gates
    // point at the stubs above, in the kernel code segment.
    unsafe { asm!("lidt [{}]", in(reg) &ptr, options(readonly, nostack, preserves_flags)) };
}

/// A 64-bit interrupt gate (IF cleared on entry) to `handler` in the kernel
/// code segment, on IST `ist` (0: no stack switch).
fn interrupt_gate(handler: u64, ist: u8) -> [u64; 2] {
    let low = (handler & 0xffff)
        | (u64::from(KERNEL_CS) << 16)
        | (u64::from(ist) << 32)
        | (0x8e << 40)
        | (((handler >> 16) & 0xffff) << 48);
    [low, handler >> 32]
}

/// The SDM's mnemonic for an exception vector.
fn mnemonic(vector: u64) -> &'static str {
    const NAMES: [&str; 22] = [
        "#DE",
        "#DB",
        "NMI",
        "#BP",
        "#OF",
        "#BR",
        "#UD",
        "#NM",
        "#DF",
        "coprocessor overrun",
        "#TS",
        "#NP",
        "#SS",
        "#GP",
        "#PF",
        "reserved",
        "#MF",
        "#AC",
        "#MC",
        "#XM",
        "#VE",
        "#CP",
    ];
    NAMES.get(vector as usize).copied().unwrap_or("reserved")
}

/// This CPU's id for a fault report, read without trusting GS: a fault
/// before `percpu::init_this_cpu` would fault again on `gs:[0]`.
fn cpu_for_report() -> usize {
    let (lo, hi): (u32, u32);
    // SAFETY: CPL 0 in long mode; reading IA32_GS_BASE has no side effects.
    unsafe {
        asm!("rdmsr", in("ecx") super::percpu::IA32_GS_BASE, out("eax") lo, out("edx") hi,
            options(nomem, nostack, preserves_flags));
    }
    let base = (u64::from(hi) << 32) | u64::from(lo);
    super::percpu::AREAS
        .iter()
        .position(|a| a as *const _ as u64 == base)
        .unwrap_or(0)
}

/// Set by the first fault: a fault while reporting one exits at once.
static IN_FAULT: AtomicBool = AtomicBool::new(false);

/// The common fault path: prints
/// `fault: vector N (#XX) at RIP …, CR2 …, error code …` and exits with 3.
extern "C" fn report(frame: &FaultFrame) -> ! {
    if IN_FAULT.swap(true, Ordering::Relaxed) {
        super::exit(3);
    }
    let cr2: u64;
    // SAFETY: CPL 0; reading CR2 has no side effects.
    unsafe { asm!("mov {}, cr2", out(reg) cr2, options(nomem, nostack, preserves_flags)) };
    let _ = writeln!(
        super::Serial,
        "fault: CPU {}: vector {} ({}) at RIP {:#x}, CR2 {:#x}, error code {:#x}, RSP {:#x}",
        cpu_for_report(),
        frame.vector,
        mnemonic(frame.vector),
        frame.rip,
        cr2,
        frame.error,
        frame.rsp,
    );
    // CR2 holds the faulting linear address of a #PF (vector 14).
    if frame.vector == 14 {
        crate::kernel::guard_page::explain(cpu_for_report(), cr2);
    }
    super::exit(3)
}
