//! The kernel's platform, named once: what vmap-lazy and slub-core are
//! generic over.

use crate::{arch, frames::Frames};
use arch_api::Platform;

/// This kernel: its live tables' layout, the frame bitmap reached through
/// the identity map (`Frames` is both), the counted TLB flusher, the per-CPU
/// register's `CpuLocal`, the IRQ-safe lock, the target's DW-CAS.
pub struct DemoKernel;

// SAFETY: the bitmap hands each frame to one owner until it is freed, every
// frame is RAM the identity map (offset 0) reaches, the map is its own
// inverse, and `Frames` allocates through nothing but the bitmap (never the
// global allocator); `arch::Cpu` upholds `CpuLocal`'s contract (see
// `aarch64/percpu.rs`, `x86_64/percpu.rs`).
unsafe impl Platform for DemoKernel {
    type Layout = arch::Layout;
    type Mem = Frames;
    type Tlb = arch::Tlb;
    type Cpu = arch::Cpu;
    type Lock = arch::Lock;
    type DwCas = slub_core::DefaultDwCas;
}
