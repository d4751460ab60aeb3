//! Per-CPU data through the GS base, and the kernel's `CpuLocal`.
//!
//! Each CPU's GS base holds the address of its [`Area`] from its first Rust
//! instructions on ([`init_this_cpu`]: the boot CPU in `x86_64_start`, an
//! AP in `smp.rs`'s entry) and nothing changes it afterwards: the kernel
//! has no user mode, so no `swapgs`, and it never reloads GS. The area's
//! first word is its own address, so `mov reg, gs:[0]` gives the area in
//! one load whether the base was written by `wrgsbase` or the MSR (Linux's
//! `this_cpu_off` trick). The kernel never preempts or migrates: the only
//! thing that can interleave with code on a CPU is an interrupt on it.

use super::irq_lock::IrqGuard;
use arch_api::CpuLocal;
use core::arch::asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// CPU slots: `--smp` accepts at most 8.
pub const MAX_CPUS: usize = 8;

/// One CPU's data. `#[repr(C)]`: `this` must be the first word (read
/// through `gs:[0]`) and `stack_top` is read by the AP entry (checked
/// below).
#[repr(C, align(128))]
pub struct Area {
    /// This area's own address (what `gs:[0]` reads).
    pub this: AtomicU64,
    /// Initial RSP of an AP (`smp.rs`).
    pub stack_top: AtomicU64,
    /// The CPU id, `0..MAX_CPUS` (the boot CPU is 0).
    pub id: usize,
    /// Top of the stack faults run on (IST 1 of this CPU's TSS).
    pub fault_stack_top: AtomicU64,
    /// The local APIC ID.
    pub apic_id: AtomicU64,
    /// Set by the CPU itself once it runs Rust on the kernel's tables.
    pub online: AtomicBool,
    /// Timer interrupts taken.
    pub ticks: AtomicU64,
    /// Allocations done by its interrupt handler.
    pub irq_allocs: AtomicU64,
    /// Objects of its tick found overwritten at the next tick.
    pub irq_bad: AtomicU64,
    /// Shootdown requests this CPU sent (one per target CPU) and served.
    pub ipis_sent: AtomicU64,
    pub ipis_received: AtomicU64,
    /// `IrqSpinLock`s this CPU holds, and the RFLAGS the first one saved.
    pub locks_held: AtomicU64,
    pub locks_saved: AtomicU64,
}

/// Offset of `stack_top`, for the AP entry's assembly.
pub const AREA_STACK_TOP: usize = 8;
const _: () = assert!(core::mem::offset_of!(Area, this) == 0);
const _: () = assert!(core::mem::offset_of!(Area, stack_top) == AREA_STACK_TOP);

impl Area {
    const fn new(id: usize) -> Self {
        Self {
            this: AtomicU64::new(0),
            stack_top: AtomicU64::new(0),
            id,
            fault_stack_top: AtomicU64::new(0),
            apic_id: AtomicU64::new(0),
            online: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
            irq_allocs: AtomicU64::new(0),
            irq_bad: AtomicU64::new(0),
            ipis_sent: AtomicU64::new(0),
            ipis_received: AtomicU64::new(0),
            locks_held: AtomicU64::new(0),
            locks_saved: AtomicU64::new(0),
        }
    }
}

/// The areas, one per CPU slot.
pub static AREAS: [Area; MAX_CPUS] = {
    let mut a = [const { Area::new(0) }; MAX_CPUS];
    let mut i = 0;
    while i < MAX_CPUS {
        a[i].id = i;
        i += 1;
    }
    a
};

/// AP stacks: RSP for the kernel, then the fault stack (IST 1).
const STACK: usize = 64 << 10;
const FAULT_STACK: usize = 16 << 10;

#[repr(C, align(16))]
struct Stack(UnsafeCell<[u8; STACK + FAULT_STACK]>);

// SAFETY: each stack is used by one CPU only (slot `i`'s by CPU `i`); no
// Rust reference to the bytes is ever made.
unsafe impl Sync for Stack {}

/// Slot 0 is unused: the boot CPU runs on the linker script's stacks
/// (which have guard pages).
static STACKS: [Stack; MAX_CPUS] =
    [const { Stack(UnsafeCell::new([0; STACK + FAULT_STACK])) }; MAX_CPUS];

/// Fills slot `id`'s stack pointers (the boot CPU, before starting it).
pub fn prepare(id: usize, apic_id: u32) -> &'static Area {
    let a = &AREAS[id];
    let base = STACKS[id].0.get() as u64;
    a.stack_top.store(base + STACK as u64, Relaxed);
    a.fault_stack_top
        .store(base + (STACK + FAULT_STACK) as u64, Relaxed);
    a.apic_id.store(u64::from(apic_id), Relaxed);
    a
}

/// IA32_GS_BASE (SDM Vol. 4, Table 2-2).
pub const IA32_GS_BASE: u32 = 0xC000_0101;
/// CR4.FSGSBASE (bit 16): enables `wrgsbase` and friends.
const CR4_FSGSBASE: u64 = 1 << 16;

/// Points this CPU's GS base at `area`. With CPUID.(EAX=07H,ECX=0):EBX[0]
/// (FSGSBASE) the base is written by `wrgsbase` once CR4.FSGSBASE is set
/// (SDM Vol. 3A §3.4.4 "Segment Loading Instructions in IA-32e Mode" and
/// the WRGSBASE entry in Vol. 2D); without it (qemu's default `qemu64`
/// CPU) through the MSR, which is the same register.
pub fn init_this_cpu(area: &'static Area) {
    let addr = area as *const Area as u64;
    area.this.store(addr, Relaxed);
    // Leaf 7 exists when leaf 0 reports max >= 7.
    let max = core::arch::x86_64::__cpuid(0).eax;
    let fsgsbase = max >= 7 && core::arch::x86_64::__cpuid_count(7, 0).ebx & 1 != 0;
    if fsgsbase {
        // SAFETY: CPL 0; the CPU has FSGSBASE, so CR4 bit 16 is not
        // reserved; `wrgsbase` is then legal and writes only the GS base,
        // which no code has used yet on this CPU.
        unsafe {
            let cr4: u64;
            asm!("mov {}, cr4", out(reg) cr4, options(nomem, nostack, preserves_flags));
            asm!("mov cr4, {}", in(reg) cr4 | CR4_FSGSBASE, options(nostack, preserves_flags));
            asm!("wrgsbase {}", in(reg) addr, options(nostack, preserves_flags));
        }
    } else {
        // SAFETY: CPL 0 in long mode, where IA32_GS_BASE exists; writing it
        // changes only the GS base, which no code has used yet on this CPU.
        unsafe {
            asm!("wrmsr", in("ecx") IA32_GS_BASE, in("eax") addr as u32,
                in("edx") (addr >> 32) as u32, options(nostack, preserves_flags));
        }
    }
}

/// This CPU's area.
#[inline(always)]
pub fn this_cpu() -> &'static Area {
    let p: u64;
    // SAFETY: GS points at this CPU's area (see the module docs), whose
    // first word is its address; the load has no side effects.
    unsafe { asm!("mov {p}, gs:[0]", p = out(reg) p, options(readonly, nostack, preserves_flags)) };
    // SAFETY: `p` is the address of one of the `AREAS` (static).
    unsafe { &*(p as *const Area) }
}

/// The kernel's `CpuLocal` on x86_64: ids through the GS base, pinning by
/// clearing RFLAGS.IF (see `EMBEDDING.md`, "The demo kernel on several
/// CPUs").
///
/// A value carries its `nr_cpus`: [`PerCpu::ALL`] (every slot, for what is
/// made before the other CPUs are up: the kmalloc caches) or
/// [`PerCpu::online`] (the CPUs brought up, for what is made afterwards:
/// the vmallocs, whose per-CPU blocks and shootdown counts follow it).
#[derive(Clone, Copy, Debug)]
pub struct PerCpu {
    nr: usize,
}

impl PerCpu {
    /// Every CPU slot, `MAX_CPUS`.
    pub const ALL: Self = Self { nr: MAX_CPUS };

    /// The CPUs online now; call it once they are all up (the kernel has
    /// no hotplug, so the ids stay `0..online`).
    pub fn online() -> Self {
        Self {
            nr: super::smp::online().clamp(1, MAX_CPUS),
        }
    }
}

impl Default for PerCpu {
    fn default() -> Self {
        Self::ALL
    }
}

// SAFETY: `nr_cpus` is fixed per value, and every CPU that runs kernel
// code has an id below it (`ALL`: every slot; `online`: made once every
// CPU is up, ids 0..online, no hotplug); `current_cpu` is the id of the CPU the
// `gs:`-relative load ran on, and since the kernel never preempts or
// migrates, the caller stays on it until it returns; `pin`'s guard clears
// IF (maskable interrupts — the tick, the shootdown IPI and the call IPI —
// are the only other code that can run on this CPU; the tick allocates and
// the call IPI runs `on_each_cpu`'s function, a flush of this CPU's slab
// state, both as code nested in a pinned section would) until it drops;
// `on_each_cpu` runs `f(i)` on CPU `i`, in the call IPI's handler (IF
// clear, as under the guard). So CPU `i`'s per-CPU cells are written only by
// code on CPU `i` — the interrupted code or an interrupt nested in it — and
// `OWNER_ONLY_WRITES` holds: the CPU-local DW-CAS (`cmpxchg16b` without
// LOCK) is atomic against an interrupt on its own CPU, since interrupts
// are taken on instruction boundaries (SDM Vol. 3A §6.6).
unsafe impl CpuLocal for PerCpu {
    const OWNER_ONLY_WRITES: bool = true;
    type Guard<'a> = IrqGuard;

    fn nr_cpus(&self) -> usize {
        self.nr
    }

    #[inline(always)]
    fn current_cpu(&self) -> Option<usize> {
        Some(this_cpu().id)
    }

    #[inline(always)]
    fn pin(&self) -> (Self::Guard<'_>, usize) {
        let g = IrqGuard::new();
        (g, this_cpu().id)
    }

    /// A call IPI to every other online CPU (`../call.rs`), whose handler
    /// runs `f` there with IF clear; this CPU's call under the guard.
    fn on_each_cpu(&self, f: &(dyn Fn(usize) + Sync)) -> usize {
        super::call::on_each_cpu(f)
    }

    /// The IRQ guard again: the only nested contexts that touch the
    /// allocator are the tick and the call IPI, which cannot arrive inside
    /// a pinned section (IF clear), and this
    /// kernel has no NMI handler, so nothing can interrupt a holder and
    /// call in here.
    #[inline(always)]
    fn try_pin_nolock(&self) -> Option<(Self::Guard<'_>, usize)> {
        Some(self.pin())
    }
}
