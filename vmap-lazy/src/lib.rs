//! vmap-lazy: `vmalloc` / `vfree` / `vmap` / `vunmap` on top of vmap-core
//! (virtual ranges) and zap-walker (page tables), with lazy, batched TLB
//! purging: what Linux's vmalloc learnt from a 10× slowdown of lazy
//! flushing (2010), the global vmap lock's contention (2024) and vfree's two
//! tree searches (2022).
//!
//! # Example
//!
//! A kernel names its platform once (here a hosted stand-in: frames from a
//! `PhysArena`, the software TLB of 4 CPUs, x86_64 tables; feature `std`)
//! and builds a vmalloc over a window of its address space:
//!
//! ```
//! use arch_api::sync::DefaultRawMutex;
//! use arch_api::{CostModel, HostedCpus, LockedDwCas, PhysArena, Platform, SoftTlb, SoftTlbCpu, VirtAddr};
//! use arch_x86_64::X86_64Pml4;
//! use vmap_lazy::{LazyMaxPages, OneSpace, Vmalloc, VmallocMem};
//!
//! struct MyKernel<'a>(core::marker::PhantomData<&'a ()>);
//! // SAFETY: a `PhysArena`'s frames are host memory nobody else uses until
//! // freed, reached through its direct map; `HostedCpus` keeps `CpuLocal`'s
//! // contract.
//! unsafe impl<'a> Platform for MyKernel<'a> {
//!     type Layout = X86_64Pml4;
//!     type Mem = PhysArena;
//!     type Tlb = SoftTlbCpu<'a>;
//!     type Cpu = HostedCpus;
//!     type Lock = DefaultRawMutex;
//!     type DwCas = LockedDwCas;
//! }
//!
//! const PAGE: u64 = 4096;
//! let frames = PhysArena::new(4 << 20, PAGE).unwrap();
//! let mem = VmallocMem::new(&frames);
//! let tlb = SoftTlb::new(4, PAGE, CostModel::FREE);
//! let window = OneSpace::<MyKernel>::new(
//!     VirtAddr::new(0xffff_c900_0000_0000),
//!     VirtAddr::new(0xffff_c900_1000_0000),
//!     PAGE,
//! )?;
//! let v: Vmalloc<'_, MyKernel> = Vmalloc::new(&mem, window, tlb.on(0), HostedCpus::new(4), LazyMaxPages)?;
//!
//! let a = v.vmalloc(3 * PAGE)?;
//! v.vfree(a)?; // entries cleared now, no TLB flush yet
//! assert_eq!(v.vmap_lazy_nr(), 3);
//! let report = v.purge_vmap_area_lazy(); // one flush for every lazy range, then reuse
//! assert_eq!(report.pages, 3);
//! assert_eq!(v.vmalloc(PAGE)?, a);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A kernel with its page table already running uses
//! [`Vmalloc::attach`] with the root instead of `new`.
//!
//! `vfree` clears an area's page-table entries at once but does not flush
//! the TLB: the range stays reserved on a lazy list, counted in
//! `vmap_lazy_nr`, until `purge_vmap_area_lazy` flushes the union of all lazy
//! ranges ONCE and only then releases them for reuse.
//!
//! The seams: the platform ([`arch_api::Platform`]); [`PurgePolicy`] (when
//! to purge): [`LazyMaxPages`] (default, Linux's `lazy_max_pages`),
//! [`Eager`] (purge on every free) and [`LookupCost`] (purge when a search
//! got expensive); the virtual-address front, vmap-core's `VmapNodes`:
//! [`OneSpace`] (default; one space under one lock, searched by a
//! `FreeAreaSearch` policy) or [`Sharded`] (Linux 6.9's `vmap_node`s, a
//! lazy list per node, one purge flushing the union of all nodes' lazy
//! ranges). Hosted test builds (features `std` + `testing`) add the
//! `StaleTlbChecker`, which proves on the software TLB model that no range
//! is handed out while a CPU may still translate it.
//!
//! Every `vmalloc` / `vmap` area has an unmapped guard page after it (one
//! page of address space, no entry and no table); [`VmFlags`] opts out
//! (`NO_GUARD`, dangerous), adds one before for stacks (`GUARD_BEFORE`,
//! [`Vmalloc::vmalloc_stack`]) or makes a request non-blocking (`NOWAIT`,
//! Linux's `GFP_NOWAIT`: try-locks only, no synchronous purge) or asks
//! for large leaves (`HUGE`, Linux's `VM_ALLOW_HUGE_VMAP`:
//! [`Vmalloc::vmalloc_huge`], `vmalloc/huge.rs`; the frame source contract
//! for contiguous runs is in `mapper/huge.rs`), through
//! [`Vmalloc::vmalloc_with`]. [`Vmalloc::vrealloc`] resizes an area in
//! place when it can (`vmalloc/realloc.rs`).
//!
//! `vm_map_ram` serves small mappings from per-CPU vmap blocks
//! (`vmap_block.rs`) and, beyond Linux, reuses freed space in a block once
//! a flush has covered it.
//!
//! Start reading at `vmalloc/mod.rs`, then `vmalloc/free.rs` and `lazy.rs`
//! (the accounting and its ordering), `purge/` and `checker.rs`. Without
//! the `alloc` feature only the policies and errors are built.
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
#[cfg(feature = "testing")]
mod checker;
mod error;
mod flags;
#[cfg(feature = "alloc")]
mod frame_cache;
#[cfg(feature = "alloc")]
mod info;
#[cfg(feature = "alloc")]
mod lazy;
#[cfg(feature = "alloc")]
mod mapper;
pub mod purge;
#[cfg(feature = "alloc")]
mod sync;
#[cfg(all(feature = "std", feature = "testing"))]
#[doc(hidden)]
pub mod testing;
#[cfg(feature = "alloc")]
mod vmalloc;
#[cfg(feature = "alloc")]
mod vmap_block;

#[cfg(kmm_loom)]
#[doc(hidden)]
pub mod loom_mutation;

#[cfg(feature = "alloc")]
pub use area::{AreaInfo, AreaKind, AreaState, PurgeReport, VmallocStats};
pub use backing::VmallocMem;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub use checker::AllocCheck;
#[cfg(all(feature = "std", feature = "testing"))]
#[doc(hidden)]
pub use checker::{StaleTlbChecker, StaleTlbViolation};
pub use error::VmallocError;
pub use flags::VmFlags;
#[cfg(feature = "alloc")]
pub use info::{InfoLine, vmallocinfo};
// The lazy accounting, for the loom models only (`tests/loom_lazy_purge*.rs`).
#[cfg(feature = "alloc")]
pub use lazy::NodeLazy;
#[cfg(all(feature = "alloc", kmm_loom))]
#[doc(hidden)]
pub use lazy::{LazyCount, LazyRange};
pub use purge::{Eager, LazyMaxPages, LookupCost, PurgeCtx, PurgePolicy};
#[cfg(feature = "alloc")]
pub use vmalloc::{OneSpace, Sharded, Vmalloc};
#[cfg(feature = "alloc")]
pub use vmap_block::{VMAP_BBMAP_BITS, VMAP_MAX_ALLOC};
