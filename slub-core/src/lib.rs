//! slub-core: a SLUB-style slab allocator whose per-CPU fast path is a
//! `(freelist, tid)` pair updated by one double-word CAS.
//!
//! It will hold: `KmemCache` and the kmalloc size classes, the tid fast path
//! and the sheaves front, partial slabs, remote frees, the `CpuLocal` seam
//! and a `GlobalAlloc` adapter. Lands with issue 6. Today it shows how a core
//! crate picks the target's default DW-CAS through `cfg-if`.
#![no_std]
#![deny(missing_docs)]

cfg_if::cfg_if! {
    if #[cfg(target_arch = "x86_64")] {
        /// The target's default double-word CAS.
        pub type DefaultDwCas = arch_x86_64::Cmpxchg16b;
    } else if #[cfg(target_arch = "aarch64")] {
        /// The target's default double-word CAS.
        pub type DefaultDwCas = arch_aarch64::Casp;
    } else {
        /// The portable fallback.
        pub type DefaultDwCas = arch_api::LockedDwCas;
    }
}
