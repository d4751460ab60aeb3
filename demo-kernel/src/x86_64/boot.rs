//! The PVH entry: from qemu's 32-bit protected mode to 64-bit Rust.
//!
//! `qemu-system-x86_64 -kernel FILE` loads an ELF that carries a Xen
//! `XEN_ELFNOTE_PHYS32_ENTRY` note (type 18) through its PVH path: every
//! `PT_LOAD` at its physical address, then a jump to the address in the note
//! with (Xen's "x86/HVM direct boot ABI"):
//!
//! * 32-bit protected mode, paging off, flat 4 GiB CS/DS/ES/SS, interrupts off;
//! * `ebx` = physical address of the `hvm_start_info` structure (`pvh.rs`);
//! * no stack.
//!
//! `pvh_start` then does what Linux's `pvh_start_xen` does, minus the parts a
//! one-CPU demo does not need: clear the BSS, identity-map the first GiB with
//! 2 MiB pages in boot tables (PML4 → PDPT → PD), enable PAE, set
//! `EFER.LME | EFER.NXE`, turn paging and write protection on, far-jump
//! through a tiny GDT into a 64-bit code segment, load the stack, enable SSE
//! (the `x86_64-unknown-none` target is soft-float and emits no SSE, but a
//! dependency's inline asm or a future target change would otherwise `#UD`
//! silently), and call [`x86_64_start`](super::x86_64_start) with the
//! start-info address. The boot tables are only a bridge: Rust replaces them
//! with tables built through `arch_x86_64::X86_64Pml4` (`paging.rs`).

use core::arch::global_asm;

global_asm!(
    // The PVH note. In an ELF64 file qemu reads the descriptor as 64 bits, so
    // `.quad` (Linux uses `_ASM_PTR` for the same reason).
    r#"
    .section .note.pvh, "a", @note
    .balign 4
    .long 4
    .long 8
    .long 18
    .asciz "Xen"
    .balign 4
    .quad pvh_start
    .balign 4
    "#,
    // The boot GDT: null, 64-bit code (0x08: L=1, P, DPL 0), data (0x10).
    // `lgdt` in 32-bit mode reads a 6-byte pointer (limit, 32-bit base).
    r#"
    .section .rodata.boot_gdt, "a"
    .balign 16
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
boot_gdt_end:
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .long boot_gdt
    "#,
    // The boot tables, zeroed with the rest of the BSS before they are filled.
    r#"
    .section .bss.boot_tables, "aw", @nobits
    .balign 4096
    .global boot_pml4
boot_pml4:
    .skip 4096
boot_pdpt:
    .skip 4096
boot_pd:
    .skip 4096
    "#,
    // The 32-bit entry. `esi` keeps the start-info address throughout.
    r#"
    .section .text.pvh_start, "ax"
    .code32
    .global pvh_start
pvh_start:
    cli
    cld
    mov esi, ebx
    "#,
    // Zero the BSS (the boot tables included) before anything lives there.
    r#"
    mov edi, offset __bss_start
    mov ecx, offset __bss_end
    sub ecx, edi
    shr ecx, 2
    xor eax, eax
    rep stosd
    "#,
    // PML4[0] -> PDPT, PDPT[0] -> PD, PD[i] = i * 2 MiB | PS | RW | P: the
    // first GiB identity-mapped, enough for the image and the start info.
    r#"
    mov eax, offset boot_pdpt
    or eax, 0x3
    mov dword ptr [boot_pml4], eax
    mov eax, offset boot_pd
    or eax, 0x3
    mov dword ptr [boot_pdpt], eax
    xor ecx, ecx
2:
    mov eax, ecx
    shl eax, 21
    or eax, 0x83
    mov dword ptr [boot_pd + ecx * 8], eax
    inc ecx
    cmp ecx, 512
    jb 2b
    "#,
    // CR3, CR4.PAE (bit 5), EFER (MSR 0xc000_0080) LME (bit 8) and NXE
    // (bit 11; the kernel tables set XD), then CR0.PG | CR0.WP | CR0.PE:
    // long mode is active from here, still in 32-bit compatibility mode.
    r#"
    mov eax, offset boot_pml4
    mov cr3, eax
    mov eax, cr4
    or eax, 0x20
    mov cr4, eax
    mov ecx, 0xc0000080
    rdmsr
    or eax, 0x900
    wrmsr
    mov eax, cr0
    or eax, 0x80010001
    mov cr0, eax
    "#,
    // Our GDT, flat data selectors, and `ljmp 0x08:3f` (hand-encoded: the
    // assembler's Intel syntax has no direct far jump) into 64-bit mode.
    r#"
    lgdt [boot_gdt_ptr]
    mov ax, 0x10
    mov ds, ax
    mov es, ax
    mov ss, ax
    xor ax, ax
    mov fs, ax
    mov gs, ax
    .byte 0xea
    .long 3f
    .word 0x08
    "#,
    // 64-bit: the stack; SSE on (CR0.EM clear, CR0.MP set, CR4.OSFXSR |
    // CR4.OSXMMEXCPT); then Rust, which never returns.
    r#"
    .code64
3:
    mov rsp, offset __boot_stack_top
    xor ebp, ebp

    mov rax, cr0
    and rax, -5
    or rax, 0x2
    mov cr0, rax
    mov rax, cr4
    or rax, 0x600
    mov cr4, rax

    mov edi, esi
    call {start}
4:
    hlt
    jmp 4b
    "#,
    start = sym super::x86_64_start,
);
