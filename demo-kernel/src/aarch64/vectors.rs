//! The EL1 exception vectors: an IRQ from EL1 (the timer tick) is handled
//! and returned from; every other exception is a failure, reported with the
//! CPU number, and the run exits with status 3.

use core::arch::{asm, global_asm};
use core::fmt::Write;

global_asm!(
    r#"
    .section .text.vectors, "ax"
    .balign 0x800
    .global demo_vectors
demo_vectors:
    .set idx, 0
    .rept 16
    .balign 0x80
    .if idx == 5
    b       demo_irq_entry
    .else
    mov     x0, #idx
    b       demo_vector_common
    .endif
    .set idx, idx + 1
    .endr
// IRQ from EL1 with SP_EL1: on the interrupted code's stack, save what a
// Rust call may clobber — x0..x18, x29, x30 (AAPCS64), and all of q0..q31
// (only the low halves of v8..v15 are callee-saved) with FPCR/FPSR, since
// the kernel's code uses SIMD — plus ELR/SPSR, call the handler, restore.
demo_irq_entry:
    sub     sp, sp, #{frame}
    stp     x0, x1, [sp, #0]
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x29, [sp, #144]
    mrs     x0, elr_el1
    mrs     x1, spsr_el1
    stp     x30, x0, [sp, #160]
    mrs     x0, fpcr
    mrs     x2, fpsr
    stp     x1, x0, [sp, #176]
    str     x2, [sp, #192]
    add     x0, sp, #208
    stp     q0, q1, [x0, #0]
    stp     q2, q3, [x0, #32]
    stp     q4, q5, [x0, #64]
    stp     q6, q7, [x0, #96]
    stp     q8, q9, [x0, #128]
    stp     q10, q11, [x0, #160]
    stp     q12, q13, [x0, #192]
    stp     q14, q15, [x0, #224]
    stp     q16, q17, [x0, #256]
    stp     q18, q19, [x0, #288]
    stp     q20, q21, [x0, #320]
    stp     q22, q23, [x0, #352]
    stp     q24, q25, [x0, #384]
    stp     q26, q27, [x0, #416]
    stp     q28, q29, [x0, #448]
    stp     q30, q31, [x0, #480]
    bl      {irq}
    add     x0, sp, #208
    ldp     q0, q1, [x0, #0]
    ldp     q2, q3, [x0, #32]
    ldp     q4, q5, [x0, #64]
    ldp     q6, q7, [x0, #96]
    ldp     q8, q9, [x0, #128]
    ldp     q10, q11, [x0, #160]
    ldp     q12, q13, [x0, #192]
    ldp     q14, q15, [x0, #224]
    ldp     q16, q17, [x0, #256]
    ldp     q18, q19, [x0, #288]
    ldp     q20, q21, [x0, #320]
    ldp     q22, q23, [x0, #352]
    ldp     q24, q25, [x0, #384]
    ldp     q26, q27, [x0, #416]
    ldp     q28, q29, [x0, #448]
    ldp     q30, q31, [x0, #480]
    ldp     x1, x0, [sp, #176]
    msr     spsr_el1, x1
    msr     fpcr, x0
    ldr     x2, [sp, #192]
    msr     fpsr, x2
    ldp     x30, x0, [sp, #160]
    msr     elr_el1, x0
    ldp     x0, x1, [sp, #0]
    ldp     x2, x3, [sp, #16]
    ldp     x4, x5, [sp, #32]
    ldp     x6, x7, [sp, #48]
    ldp     x8, x9, [sp, #64]
    ldp     x10, x11, [sp, #80]
    ldp     x12, x13, [sp, #96]
    ldp     x14, x15, [sp, #112]
    ldp     x16, x17, [sp, #128]
    ldp     x18, x29, [sp, #144]
    add     sp, sp, #{frame}
    // An interrupted ldxp/stxp (the DW-CAS) must not complete on a
    // monitor the handler's own exclusives left behind: clear it, so its
    // stxp fails and the sequence retries.
    clrex
    eret
demo_vector_common:
    // A fresh stack, this CPU's: the fault may have been a stack overflow.
    mrs     x1, tpidr_el1
    ldr     x1, [x1, #{exc_stack_top}]
    mov     sp, x1
    bl      {report}
1:  b       1b
    .ltorg
"#,
    report = sym report,
    irq = sym super::tick::handle_irq,
    frame = const 208 + 512,
    exc_stack_top = const super::percpu::AREA_EXC_STACK_TOP,
);

unsafe extern "C" {
    /// The vector table (`VBAR_EL1`), 2 KiB aligned.
    pub(super) fn demo_vectors();
}

/// Vector groups, in table order (Arm ARM DDI 0487 M.a, D1.4.1.6
/// "Exception vectors": offsets from VBAR_EL1 per source and kind).
const SOURCES: [&str; 4] = [
    "current EL, SP0",
    "current EL, SPx",
    "lower EL, A64",
    "lower EL, A32",
];
const KINDS: [&str; 4] = ["synchronous", "IRQ", "FIQ", "SError"];

/// What ESR_EL1.EC says, for the common classes.
fn class_name(ec: u64) -> &'static str {
    match ec {
        0x00 => "unknown instruction",
        0x07 => "FP/SIMD access trapped",
        0x15 => "SVC",
        0x18 => "system register access trapped",
        0x20 | 0x21 => "instruction abort",
        0x22 => "PC alignment fault",
        0x24 | 0x25 => "data abort",
        0x26 => "SP alignment fault",
        0x3c => "BRK",
        _ => "other",
    }
}

/// Prints `fault: …` with the syndrome and exits 3.
extern "C" fn report(idx: u64) -> ! {
    let (esr, far, elr): (u64, u64, u64);
    // SAFETY: reading the exception syndrome registers has no side effects.
    unsafe {
        asm!(
            "mrs {esr}, esr_el1",
            "mrs {far}, far_el1",
            "mrs {elr}, elr_el1",
            esr = out(reg) esr,
            far = out(reg) far,
            elr = out(reg) elr,
            options(nomem, nostack),
        );
    }
    let idx = (idx & 15) as usize;
    let ec = (esr >> 26) & 0x3f;
    let mut out = crate::kernel::Console;
    let _ = writeln!(
        out,
        "fault: CPU {}: {} exception from {}: {} (ESR_EL1 {esr:#x}, EC {ec:#x}, ISS {:#x}) at FAR {far:#x}, ELR {elr:#x}",
        super::percpu::this_cpu().id,
        KINDS[idx % 4],
        SOURCES[idx / 4],
        class_name(ec),
        esr & 0x1ff_ffff,
    );
    // FAR_EL1 holds the faulting address of a data abort (EC 0x24 from a
    // lower EL, 0x25 from this one).
    if ec == 0x24 || ec == 0x25 {
        crate::kernel::guard_page::explain(super::percpu::this_cpu().id, far);
    }
    super::exit(3)
}
