//! The EL1 exception vectors: every exception is a failure here (interrupts
//! stay masked), so each of the 16 entries reports what happened and exits
//! with status 3.

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
    mov     x0, #idx
    b       demo_vector_common
    .set idx, idx + 1
    .endr
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
    exc_stack_top = const super::percpu::AREA_EXC_STACK_TOP,
);

unsafe extern "C" {
    /// The vector table (`VBAR_EL1`), 2 KiB aligned.
    pub(super) fn demo_vectors();
}

/// Vector groups, in table order (Arm ARM D1.10.2).
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
    super::exit(3)
}
