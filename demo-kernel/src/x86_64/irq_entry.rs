//! The entry stubs of the device interrupts (the local APIC timer, the TLB
//! shootdown IPI, the call IPI of `on_each_cpu`, the APIC's spurious
//! vector).
//!
//! An interrupt can land anywhere outside an IF-clear section, so the stub
//! saves every general register and the x87/SSE state (`fxsave64`) before
//! calling Rust, and restores them before `iretq`. The kernel target is
//! soft-float, but a dependency's inline asm may use SSE registers, and an
//! interrupt must be invisible to the code it cut into. No stack switch:
//! the gates have IST 0 and there is no privilege change, so the CPU pushes
//! its frame on the interrupted stack after aligning RSP to 16 (SDM Vol. 3A
//! §6.14.2); the x86_64-unknown-none target has no red zone, so nothing
//! below RSP is live.

use core::arch::global_asm;

global_asm!(
    r#"
    .section .text.irq_entry, "ax"
    .global demo_irq_timer
demo_irq_timer:
    push rax
    lea rax, [rip + {tick}]
    jmp demo_irq_common

    .global demo_irq_shootdown
demo_irq_shootdown:
    push rax
    lea rax, [rip + {shootdown}]
    jmp demo_irq_common

    .global demo_irq_call
demo_irq_call:
    push rax
    lea rax, [rip + {call}]
    jmp demo_irq_common

    // A spurious interrupt gets no EOI (SDM Vol. 3A §11.9).
    .global demo_irq_spurious
demo_irq_spurious:
    iretq

    // RAX holds the handler; the frame (40 bytes) and RAX are pushed, 14
    // more registers make 160 bytes: RSP is 16-aligned again for the
    // fxsave area and the call.
demo_irq_common:
    push rcx
    push rdx
    push rbx
    push rbp
    push rsi
    push rdi
    push r8
    push r9
    push r10
    push r11
    push r12
    push r13
    push r14
    push r15
    mov rbx, rsp
    sub rsp, 512
    and rsp, -16
    fxsave64 [rsp]
    cld
    call rax
    fxrstor64 [rsp]
    mov rsp, rbx
    pop r15
    pop r14
    pop r13
    pop r12
    pop r11
    pop r10
    pop r9
    pop r8
    pop rdi
    pop rsi
    pop rbp
    pop rbx
    pop rdx
    pop rcx
    pop rax
    iretq
    "#,
    tick = sym super::tick::handle_tick,
    shootdown = sym super::shootdown::handle_ipi,
    call = sym super::call_ipi::handle,
);

unsafe extern "C" {
    pub fn demo_irq_timer();
    pub fn demo_irq_shootdown();
    pub fn demo_irq_call();
    pub fn demo_irq_spurious();
}
