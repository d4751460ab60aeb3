//! The kernel's `CpuLocal` (slub-core's CPU and the calling CPU of
//! vmalloc, `Platform::Cpu`): one CPU, interrupts masked for the whole run,
//! so nothing can interleave with an allocation and the guard has nothing
//! to save.

use arch_api::CpuLocal;

/// The only CPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct OneCpu;

// SAFETY: one CPU (id 0) that never takes an interrupt (DAIF stays masked
// on aarch64, IF stays clear on x86_64): the per-CPU cells are written only
// by code running on that CPU, one call at a time, so the CPU-local DW-CAS
// (`OWNER_ONLY_WRITES`) is sound and pinning needs no guard.
unsafe impl CpuLocal for OneCpu {
    const OWNER_ONLY_WRITES: bool = true;
    type Guard<'a> = ();

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> Option<usize> {
        Some(0)
    }

    fn pin(&self) -> (Self::Guard<'_>, usize) {
        ((), 0)
    }
}
