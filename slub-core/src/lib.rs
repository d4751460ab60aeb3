//! slub-core: a SLUB-style slab allocator whose per-CPU fast path is a
//! `(freelist, tid)` pair updated by one double-word CAS, with Linux 7.0's
//! "sheaves" front as a per-cache alternative.
//!
//! # Example
//!
//! A cache of 64-byte objects. Slab pages come from a [`PageSource`], the
//! CPU id from a [`CpuLocal`]; here the hosted `ArenaPages` and `ThreadCpus`
//! (feature `std`), on bare metal [`FramePages`] and the kernel's own
//! `CpuLocal`:
//!
//! ```
//! use arch_api::PhysArena;
//! use slub_core::{ArenaPages, CacheFlags, KmemCache, ThreadCpus};
//!
//! let arena = PhysArena::new(4 << 20, 4096).unwrap();
//! let mut cache: KmemCache<ArenaPages<'_>, ThreadCpus> =
//!     KmemCache::new("inode", 64, 8, CacheFlags::empty(), ArenaPages::new(&arena), ThreadCpus)
//!         .unwrap();
//! let obj = cache.alloc().unwrap(); // the lockless (freelist, tid) fast path
//! // SAFETY: `obj` is a fresh 64-byte object.
//! unsafe { obj.as_ptr().write_bytes(0, 64) };
//! // SAFETY: allocated from this cache above, freed once.
//! unsafe { cache.free(obj) }.unwrap();
//! cache.destroy().unwrap();
//! assert_eq!(arena.frames_in_use(), 0); // every slab page went back
//! ```
//!
//! # What is here
//!
//! * [`KmemCache`] (`kmem_cache`): `new(name, size, align, flags, …)`,
//!   [`alloc`](KmemCache::alloc), [`free`](KmemCache::free),
//!   [`shrink`](KmemCache::shrink), [`destroy`](KmemCache::destroy).
//! * [`Kmalloc`]: size classes 8, 16, …, 16384 from slabs, larger sizes from
//!   the page source; [`SlubGlobalAlloc`] makes it a `#[global_allocator]`.
//! * Two fronts, chosen per cache ([`CacheFlags::SHEAVES`]):
//!   the lockless tid path (`tid.rs`) and sheaves + barn (`sheaves.rs`,
//!   `barn.rs`).
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
//! * The DW-CAS `D: `[`DwCas`](arch_api::DwCas), default [`DefaultDwCas`]
//!   (`cmpxchg16b`, `casp`, or the portable locked one), chosen by `cfg-if`.
//!   ia64's simulated `cmp8xchg16` (compares the tid only) works too.
//! * [`CpuLocal`]: CPU id and guard. Hosted (feature `std`): `ThreadCpus` (each thread is a
//!   CPU; CPU-local CAS) and `MigratingCpus` (tasks share CPU slots and can
//!   migrate between reading the tid and the CAS; SMP CAS). Bare metal: the
//!   OS implements it; `cpu_local/mod.rs` lists what it must guarantee.
//! * [`PageSource`]: where slab pages come from: the OS's arch-api
//!   `FrameSource` and its direct map `PhysMap`, as one type (the
//!   platform's, or [`FramePages`] pairing two); its docs list the sizes,
//!   alignments and calling contexts.
//! * The raw lock `R: lock_api::RawMutex` of node lists and the barn
//!   (default `arch_api::sync::DefaultRawMutex`).
//!
//! # Layering
//!
//! Modules depend one way only, each layer on those below it:
//!
//! 1. `cache.rs` ([`KmemCache`]): validation, lifecycle and the one-byte
//!    dispatch to the cache's front; `kmalloc.rs` and `global_alloc.rs` sit
//!    on top of it.
//! 2. `sheaves.rs` (`SheafFront`, over `barn.rs`), which refills and flushes
//!    through the tid front's CPU slab, as Linux's bulk allocation does.
//! 3. `tid.rs` (`TidFront`): the `(freelist, tid)` cells and the per-CPU
//!    partial lists.
//! 4. `slabs/` (`Slabs`): new and discarded slabs, the node partial list,
//!    freezing, deactivation and remote frees.
//! 5. Leaves: `percpu.rs` (per-CPU arrays in page-source memory), `slab.rs`,
//!    `freelist.rs`, `hardening.rs`, `stats.rs`, `page_source.rs`,
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
mod error;
mod freelist;
mod global_alloc;
pub mod hardening;
mod kmalloc;
mod loom_hooks;
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
pub use cache::{CacheConfig, CacheFlags, KmemCache};
pub use error::{AllocError, CacheError, DestroyError, FreeError};
pub use global_alloc::SlubGlobalAlloc;
pub use kmalloc::{
    KMALLOC_MAX_CACHE_SIZE, KMALLOC_MIN_SIZE, Kmalloc, NR_KMALLOC_CLASSES, kmalloc_index,
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
