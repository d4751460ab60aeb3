//! slub-core: a SLUB-style slab allocator whose per-CPU fast path is a
//! `(freelist, tid)` pair updated by one double-word CAS, with Linux 7.0's
//! "sheaves" front as a per-cache alternative.
//!
//! # Example
//!
//! An OS names its platform once (an [`arch_api::Platform`]: frames and
//! direct map, CPU-local access, raw lock, DW-CAS, and the page-table
//! layout and TLB its vmalloc uses) and writes `KmemCache<MyKernel>`,
//! `Kmalloc<MyKernel>`. Here a hosted stand-in (feature `std`): slab pages
//! from the host heap, each thread a CPU; a kernel names its frame
//! allocator and `CpuLocal` instead.
//!
//! ```
//! use arch_api::sync::DefaultRawMutex;
//! use arch_api::{Platform, SoftTlbCpu};
//! use slub_core::{CacheFlags, DefaultDwCas, KmemCache, SystemPages, ThreadCpus};
//!
//! struct MyKernel;
//!
//! // SAFETY: `SystemPages` hands out host memory nobody else uses until it
//! // is freed, identity-mapped, and not through the global allocator;
//! // `ThreadCpus` upholds `CpuLocal`'s contract.
//! unsafe impl Platform for MyKernel {
//!     type Layout = arch_ia64_sim::Ia64Sim; // vmalloc's tables (slabs map none)
//!     type Mem = &'static SystemPages;
//!     type Tlb = SoftTlbCpu<'static>;
//!     type Cpu = ThreadCpus;
//!     type Lock = DefaultRawMutex;
//!     type DwCas = DefaultDwCas;
//! }
//!
//! static PAGES: SystemPages = SystemPages::new();
//!
//! let mut cache =
//!     KmemCache::<MyKernel>::new("inode", 64, 8, CacheFlags::empty(), &PAGES, ThreadCpus)
//!         .unwrap();
//! let obj = cache.alloc().unwrap(); // the lockless (freelist, tid) fast path
//! // SAFETY: `obj` is a fresh 64-byte object.
//! unsafe { obj.as_ptr().write_bytes(0, 64) };
//! // SAFETY: allocated from this cache above, freed once.
//! unsafe { cache.free(obj) }.unwrap();
//! cache.destroy().unwrap();
//! assert_eq!(PAGES.blocks_in_use(), 0); // every slab page went back
//! ```
//!
//! # What is here
//!
//! * [`KmemCache`] (`kmem_cache`): `new(name, size, align, flags, …)`,
//!   [`alloc`](KmemCache::alloc), [`free`](KmemCache::free),
//!   [`free_deferred`](KmemCache::free_deferred) (`kfree_rcu`, with the
//!   OS's [`GracePeriod`]),
//!   [`shrink`](KmemCache::shrink), [`destroy`](KmemCache::destroy).
//! * [`Kmalloc`]: size classes 8, 16, …, 16384 from slabs, larger sizes from
//!   the platform's frames; [`SlubGlobalAlloc`] makes it a `#[global_allocator]`.
//!   Against heap spraying: [`Kmalloc::buckets`] (`kmem_buckets_create`, a
//!   subsystem's own set of classes) and [`RandomKmalloc`]
//!   (`CONFIG_RANDOM_KMALLOC_CACHES`, 16 copies picked by caller).
//! * Two fronts, chosen per cache ([`CacheFlags::SHEAVES`]):
//!   the lockless tid path (`tid.rs`; frees of other slabs' objects join
//!   the CPU's detached freelist, `tid/detached.rs`, and reach their slab a
//!   chain at a time) and sheaves + barn (`sheaves.rs`, `barn.rs`).
//! * The slab layer both fronts share (`slabs/`): slabs with end-token
//!   freelists (`slab.rs`, `freelist.rs`), partial lists, freezing and
//!   deactivation (`slabs/partial.rs`), remote frees with a slab-level
//!   DW-CAS (`slabs/remote.rs`).
//! * Hardening: obfuscated, validated freelist pointers (always), optional
//!   freelist randomisation, fast-path double-free detection; red zones,
//!   poisoning and ownership checks under `debug` (`hardening.rs`).
//! * Counters under `stats` (`KmemCache::stats`, `CacheStats`, `StatItem`)
//!   and a `/proc/slabinfo` line ([`KmemCache::slabinfo`], [`SlabInfo`]).
//!
//! # Seams
//!
//! Every shipped type takes one parameter, the OS's
//! [`Platform`](arch_api::Platform) `K`; slub-core uses four of its types:
//!
//! * `K::DwCas`, the fast path's [`DwCas`](arch_api::DwCas): usually
//!   [`DefaultDwCas`] (`cmpxchg16b`, `casp`, or the portable locked one),
//!   chosen by `cfg-if`. ia64's simulated `cmp8xchg16` (compares the tid
//!   only) works too.
//! * `K::Cpu`, a [`CpuLocal`]: CPU id and guard. Hosted (feature `std`):
//!   `ThreadCpus` (each thread is a CPU; CPU-local CAS) and `MigratingCpus`
//!   (tasks share CPU slots and can migrate between reading the tid and the
//!   CAS; SMP CAS). Bare metal: the OS implements it; the
//!   [`cpu`](arch_api::cpu) module docs list what it must guarantee. A
//!   backend whose cells only their owner writes (`OWNER_ONLY_WRITES`)
//!   also gets the tid front's detached freelists (frees of other slabs'
//!   objects without a LOCKed instruction each).
//! * `K::Mem`: where slab pages come from: the OS's arch-api `FrameSource`
//!   and its direct map `PhysMap`, as one handle (the kernel's own, or
//!   [`FramePages`] pairing two); [`PageSource`] lists the sizes,
//!   alignments and calling contexts it must serve, and is how the hosted
//!   sources ([`FramePages`] too) state that they meet the platform's
//!   contract.
//! * `K::Lock`, the raw lock of node lists and the barn (usually
//!   `arch_api::sync::DefaultRawMutex`).
//!
//! # Layering
//!
//! Modules depend one way only, each layer on those below it:
//!
//! 1. `cache.rs` ([`KmemCache`]): validation, lifecycle and the one-byte
//!    dispatch to the cache's front (`cache/alloc_free.rs`: the fast paths
//!    and the one call to the rest); `kmalloc.rs` and `global_alloc.rs` sit
//!    on top of it (`Kmalloc` keeps its caches' per-CPU sheaves lines in
//!    one area, `sheaves/lines.rs`).
//! 2. `sheaves.rs` (`SheafFront`, over `barn.rs`), which refills and flushes
//!    through the tid front's CPU slab, as Linux's bulk allocation does.
//! 3. `tid.rs` (`TidFront`): the `(freelist, tid)` cells, the detached
//!    freelists and the per-CPU partial lists.
//! 4. `slabs/` (`Slabs`): new and discarded slabs, the node partial list,
//!    freezing, deactivation and remote frees.
//! 5. Leaves: `percpu.rs` (per-CPU arrays in page-source memory), `slab.rs`,
//!    `freelist.rs`, `hardening.rs`, `stats.rs`, `page_source.rs`, `mem.rs`,
//!    `cpu_local/`, `error.rs`, `sync.rs`.
//!
//! Each front and the slab layer own their state in private fields (each
//! front its own per-CPU line type); an upper layer passes `&Slabs` (and the
//! sheaves front `&TidFront`) into every call rather than reaching into
//! them.
//!
//! # Where to start reading
//!
//! `tid.rs` (the fast path and its slow path), then `freelist.rs` and
//! `slab.rs`, then `slabs/partial.rs` / `slabs/remote.rs`, then `sheaves.rs`.
#![no_std]
#![deny(missing_docs)]

#[cfg(any(feature = "std", kmm_loom))]
extern crate std;

mod barn;
mod cache;
pub mod cpu_local;
mod deferred;
mod error;
mod freelist;
mod global_alloc;
pub mod hardening;
mod kmalloc;
mod loom_hooks;
mod mem;
mod page_source;
mod percpu;
mod sheaves;
mod slab;
mod slabs;
mod stats;
mod sync;
#[cfg(any(kmm_loom, feature = "testing"))]
pub mod testing;
mod tid;

#[cfg(kmm_loom)]
#[doc(hidden)]
pub mod loom_mutation;

pub use arch_api::CpuLocal;
pub use barn::sheaf_capacity_for;
pub use cache::{CacheConfig, CacheFlags, KmemCache, NewSlabHook, Prefilled};
pub use deferred::{GracePeriod, MAX_LARGE_PENDING, MAX_PENDING};
pub use error::{AllocError, CacheError, DestroyError, FreeError};
pub use global_alloc::SlubGlobalAlloc;
pub use kmalloc::{
    KMALLOC_MAX_CACHE_SIZE, KMALLOC_MIN_SIZE, Kmalloc, KmemBuckets, NR_KMALLOC_CLASSES,
    NR_RANDOM_COPIES, RandomKmalloc, RandomSite, kmalloc_index,
};
pub use page_source::{FramePages, PageSource};
pub use stats::SlabInfo;
#[cfg(feature = "stats")]
pub use stats::{CacheStats, NR_STATS, StatItem};

#[cfg(feature = "std")]
pub use arch_api::ThreadCpus;
#[cfg(feature = "std")]
pub use cpu_local::migrating::MigratingCpus;
#[cfg(feature = "std")]
pub use page_source::{ArenaPages, SystemPages};

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
