//! vmap-lazy: `vmalloc` / `vfree` / `vmap` / `vunmap` on top of vmap-core
//! (virtual ranges) and zap-walker (page tables), with lazy, batched TLB
//! purging: what Linux's vmalloc learnt from a 10× slowdown of lazy
//! flushing (2010), the global vmap lock's contention (2024) and vfree's two
//! tree searches (2022).
//!
//! # Example
//!
//! A vmalloc window over the kernel's frames and TLB; here the hosted
//! `PhysArena` and software TLB of 4 CPUs (feature `std`):
//!
//! ```
//! use arch_api::{CostModel, PhysArena, SoftTlb, SoftTlbCpu, VirtAddr};
//! use arch_x86_64::X86_64Pml4;
//! use vmap_lazy::{LazyMaxPages, NoCheck, Vmalloc, VmallocConfig, VmallocError, VmallocMem};
//!
//! const PAGE: u64 = 4096;
//! let frames = PhysArena::new(4 << 20, PAGE).unwrap();
//! let mem = VmallocMem::new(&frames);
//! let tlb = SoftTlb::new(4, PAGE, CostModel::FREE);
//! let config = VmallocConfig {
//!     vstart: VirtAddr::new(0xffff_c900_0000_0000),
//!     vend: VirtAddr::new(0xffff_c900_1000_0000),
//!     cpus: 4,
//! };
//! let v: Vmalloc<'_, X86_64Pml4, PhysArena, SoftTlbCpu<'_>> =
//!     Vmalloc::new(&mem, tlb.on(0), LazyMaxPages, NoCheck, config)?;
//!
//! let a = v.vmalloc(3 * PAGE)?;
//! v.vfree(a)?; // entries cleared now, no TLB flush yet
//! assert_eq!(v.vmap_lazy_nr(), 3);
//! let report = v.purge(); // one flush for every lazy range, then reuse
//! assert_eq!(report.pages, 3);
//! assert_eq!(v.vmalloc(PAGE)?, a);
//! # Ok::<(), VmallocError>(())
//! ```
//!
//! `vfree` clears an area's page-table entries at once but does not flush
//! the TLB: the range stays reserved on a lazy list, counted in
//! `vmap_lazy_nr`, until `purge_vmap_area_lazy` flushes the union of all lazy
//! ranges ONCE and only then releases them for reuse.
//!
//! The seam is [`PurgePolicy`] (when to purge): [`LazyMaxPages`] (default,
//! Linux's `lazy_max_pages`), [`Eager`] (purge on every free) and
//! [`LookupCost`] (purge when a search got expensive). Each range handed out
//! goes through an [`AllocCheck`] ([`NoCheck`] by default); hosted test
//! builds (features `std` + `testing`) add `StaleTlbChecker`, which proves on
//! the software TLB model that no range is handed out while a CPU may still
//! translate it.
//!
//! [`NodeVmalloc`] runs the same protocol over vmap-core's concurrent fronts
//! (sharded `vmap_node`s or one global lock), with a lazy list per node and
//! one purge flushing the union of all nodes' lazy ranges.
//!
//! `vm_map_ram` (on both fronts) serves small mappings from per-CPU vmap blocks
//! (`vmap_block.rs`) and, beyond Linux, reuses freed space in a block once a
//! flush has covered it.
//!
//! Start reading at `vmalloc.rs`, then `lazy.rs` (the accounting and its
//! ordering), `purge/` and `checker.rs`. Without the `alloc` feature only the
//! policies and errors are built.
#![no_std]
#![deny(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

#[cfg(feature = "alloc")]
mod area;
#[cfg(feature = "alloc")]
mod area_table;
mod backing;
mod checker;
mod error;
#[cfg(feature = "alloc")]
mod frame_cache;
#[cfg(feature = "alloc")]
mod info;
#[cfg(feature = "alloc")]
mod lazy;
#[cfg(feature = "alloc")]
mod mapper;
#[cfg(feature = "alloc")]
mod nodes;
pub mod purge;
#[cfg(feature = "alloc")]
mod sync;
#[cfg(feature = "alloc")]
mod vmalloc;
#[cfg(feature = "alloc")]
mod vmap_block;

#[cfg(kmm_loom)]
#[doc(hidden)]
pub mod loom_mutation;

#[cfg(feature = "alloc")]
pub use area::{AreaInfo, AreaKind, AreaState, PurgeReport, VmallocConfig, VmallocStats};
pub use backing::VmallocMem;
pub use checker::{AllocCheck, NoCheck};
#[cfg(all(feature = "std", feature = "testing"))]
pub use checker::{StaleTlbChecker, StaleTlbViolation};
pub use error::VmallocError;
#[cfg(feature = "alloc")]
pub use info::{InfoLine, vmallocinfo};
// The lazy accounting, for the loom models only (`tests/loom_lazy_purge*.rs`).
#[cfg(all(feature = "alloc", kmm_loom))]
#[doc(hidden)]
pub use lazy::{LazyAccount, LazyRange, PurgeBatch};
#[cfg(feature = "alloc")]
pub use nodes::{NodeLazy, NodeVmalloc};
pub use purge::{Eager, LazyMaxPages, LookupCost, PurgeCtx, PurgePolicy};
#[cfg(feature = "alloc")]
pub use vmalloc::Vmalloc;
#[cfg(feature = "alloc")]
pub use vmap_block::{VMAP_BBMAP_BITS, VMAP_MAX_ALLOC};

cfg_if::cfg_if! {
    if #[cfg(target_arch = "x86_64")] {
        /// The target's default page-table layout.
        pub type DefaultLayout = arch_x86_64::X86_64Pml4;
    } else if #[cfg(target_arch = "aarch64")] {
        /// The target's default page-table layout.
        pub type DefaultLayout = arch_aarch64::Aarch64Granule4K;
    }
}
