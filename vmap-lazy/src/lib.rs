//! vmap-lazy: `vmalloc` / `vfree` / `vmap` / `vm_map_ram` on top of vmap-core
//! and zap-walker, with lazy, batched TLB purging.
//!
//! It will hold: the `PurgePolicy` seam (`lazy-max-pages`, `eager`,
//! `lookup-cost`), `vmap_lazy_nr` accounting, vmap blocks, and the hosted
//! stale-TLB checker. Lands with issue 5. Today it shows how a core crate picks
//! the target's default backend: through `cfg-if`, never by naming an
//! architecture in its own logic.
#![no_std]
#![deny(missing_docs)]

cfg_if::cfg_if! {
    if #[cfg(target_arch = "x86_64")] {
        /// The target's default page-table layout.
        pub type DefaultLayout = arch_x86_64::X86_64Pml4;
    } else if #[cfg(target_arch = "aarch64")] {
        /// The target's default page-table layout.
        pub type DefaultLayout = arch_aarch64::Aarch64Granule4K;
    }
}
