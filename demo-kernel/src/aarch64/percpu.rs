//! Per-CPU data through `TPIDR_EL1`, and the kernel's `CpuLocal`.
//!
//! Each CPU's `TPIDR_EL1` holds the address of its [`Area`] from its first
//! instructions on (`_start` for the boot CPU, `secondary_entry` for the
//! others), and nothing ever changes it, so one `mrs` and one load give the
//! CPU id. The demo kernel never preempts or migrates: code runs on the CPU
//! it started on until it returns, and the only thing that can interleave
//! with it on that CPU is an interrupt (the timer tick, which allocates).

use super::irq_lock::IrqGuard;
use arch_api::CpuLocal;
use core::arch::asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering::Relaxed};

/// CPU slots: GICv2 has 8 CPU interfaces, `--smp` accepts at most 8.
pub const MAX_CPUS: usize = 8;

/// One CPU's data. `#[repr(C)]`: the assembly reads `stack_top` and
/// `exc_stack_top` at fixed offsets (checked below).
#[repr(C, align(128))]
pub struct Area {
    /// The CPU id, `0..MAX_CPUS` (slot order, boot CPU 0).
    pub id: usize,
    /// Initial SP of a secondary (`secondary_entry`).
    pub stack_top: AtomicU64,
    /// SP the fault report switches to (the fault may be a stack overflow).
    pub exc_stack_top: AtomicU64,
    /// The MPIDR_EL1 affinity PSCI started it with.
    pub mpidr: AtomicU64,
    /// Set by the CPU itself once it runs Rust with the MMU on.
    pub online: AtomicBool,
    /// Its GIC CPU interface bit (`gic::init_cpu`), an SGI's target.
    pub gic_target: AtomicU8,
    /// Timer interrupts taken.
    pub ticks: AtomicU64,
    /// Allocations done by its interrupt handler.
    pub irq_allocs: AtomicU64,
    /// Objects of its tick found overwritten at the next tick.
    pub irq_bad: AtomicU64,
    /// `IrqSpinLock`s this CPU holds, and the `DAIF` the first one saved.
    pub locks_held: AtomicU64,
    pub locks_saved: AtomicU64,
}

/// Offsets the assembly uses.
pub const AREA_STACK_TOP: usize = 8;
pub const AREA_EXC_STACK_TOP: usize = 16;
const _: () = assert!(core::mem::offset_of!(Area, stack_top) == AREA_STACK_TOP);
const _: () = assert!(core::mem::offset_of!(Area, exc_stack_top) == AREA_EXC_STACK_TOP);

impl Area {
    const fn new(id: usize) -> Self {
        Self {
            id,
            stack_top: AtomicU64::new(0),
            exc_stack_top: AtomicU64::new(0),
            mpidr: AtomicU64::new(0),
            online: AtomicBool::new(false),
            gic_target: AtomicU8::new(0),
            ticks: AtomicU64::new(0),
            irq_allocs: AtomicU64::new(0),
            irq_bad: AtomicU64::new(0),
            locks_held: AtomicU64::new(0),
            locks_saved: AtomicU64::new(0),
        }
    }
}

/// The areas, in `.data` (ids are non-zero), so `_start` may point
/// `TPIDR_EL1` at slot 0 before BSS is cleared.
pub static AREAS: [Area; MAX_CPUS] = {
    let mut a = [const { Area::new(0) }; MAX_CPUS];
    let mut i = 0;
    while i < MAX_CPUS {
        a[i].id = i;
        i += 1;
    }
    a
};

/// Secondary stacks: SP for the kernel, then room for the fault report.
const STACK: usize = 64 << 10;
const EXC_STACK: usize = 16 << 10;

#[repr(C, align(16))]
struct Stack(UnsafeCell<[u8; STACK + EXC_STACK]>);

// SAFETY: each stack is used by one CPU only (slot `i`'s by CPU `i`); no
// Rust reference to the bytes is ever made.
unsafe impl Sync for Stack {}

/// Slot 0 is unused: the boot CPU runs on the linker script's stack.
static STACKS: [Stack; MAX_CPUS] =
    [const { Stack(UnsafeCell::new([0; STACK + EXC_STACK])) }; MAX_CPUS];

/// Fills slot `id`'s stack pointers (called by the boot CPU before
/// starting it).
pub fn prepare(id: usize, mpidr: u64) -> &'static Area {
    let a = &AREAS[id];
    let base = STACKS[id].0.get() as u64;
    a.stack_top.store(base + STACK as u64, Relaxed);
    a.exc_stack_top
        .store(base + (STACK + EXC_STACK) as u64, Relaxed);
    a.mpidr.store(mpidr, Relaxed);
    a
}

/// This CPU's area.
#[inline(always)]
pub fn this_cpu() -> &'static Area {
    let p: u64;
    // SAFETY: reading TPIDR_EL1 has no side effects.
    unsafe { asm!("mrs {p}, tpidr_el1", p = out(reg) p, options(nomem, nostack, preserves_flags)) };
    // SAFETY: every CPU sets TPIDR_EL1 to its slot of `AREAS` before any
    // Rust code runs on it and never changes it.
    unsafe { &*(p as *const Area) }
}

/// The kernel's `CpuLocal` on aarch64: ids from `TPIDR_EL1`, pinning by
/// masking IRQs (see `EMBEDDING.md`, "The demo kernel on several CPUs").
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
// `mrs` ran on, and since the kernel never preempts or migrates, the caller
// stays on it until it returns; `pin`'s guard masks IRQs (the only other
// code that can run on this CPU: the tick, which allocates, and the call
// SGI, which runs `on_each_cpu`'s function, a flush of this CPU's slab
// state, as code nested in a pinned section would) until it drops;
// `on_each_cpu` runs `f(i)` on CPU `i`, in the SGI's handler (IRQs masked,
// as under the guard). So the per-CPU cells of CPU `i` are written
// only by code running on CPU `i` — the interrupted code or an interrupt
// nested in it — and `OWNER_ONLY_WRITES` holds: the CPU-local DW-CAS is
// atomic against an interrupt on its own CPU.
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

    /// A call SGI to every other online CPU (`../call.rs`), whose handler
    /// runs `f` there with IRQs masked; this CPU's call under the guard.
    fn on_each_cpu(&self, f: &(dyn Fn(usize) + Sync)) -> usize {
        super::call::on_each_cpu(f)
    }

    /// The IRQ guard again: the only nested contexts that touch the
    /// allocator are the tick and the call SGI, which cannot arrive inside
    /// a pinned section (IRQs masked (DAIF.I)), and this
    /// kernel has no NMI handler, so nothing can interrupt a holder and
    /// call in here.
    #[inline(always)]
    fn try_pin_nolock(&self) -> Option<(Self::Guard<'_>, usize)> {
        Some(self.pin())
    }
}
