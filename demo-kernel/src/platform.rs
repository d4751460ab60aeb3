//! The kernel's platform, named once: what vmap-lazy (and, as it moves
//! over, slub-core) is generic over.

use crate::{arch, cpu::OneCpu, frames::Frames};
use arch_api::{Platform, sync::DefaultRawMutex};

/// This kernel: its live tables' layout, the frame bitmap with the
/// identity map, the counted TLB flusher, one CPU.
pub struct DemoKernel;

// SAFETY: `Frames` hands out free RAM frames that nobody else uses until
// they are freed, and its identity map (offset 0) reaches every one of
// them, both ways; `OneCpu` upholds `CpuLocal`'s contract (see `cpu.rs`).
unsafe impl Platform for DemoKernel {
    type Layout = arch::Layout;
    type Mem = Frames;
    type Tlb = arch::Tlb;
    type Cpu = OneCpu;
    type Lock = DefaultRawMutex;
    #[cfg(target_arch = "x86_64")]
    type DwCas = arch_x86_64::Cmpxchg16b;
    #[cfg(target_arch = "aarch64")]
    type DwCas = arch_aarch64::Casp;
}
