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
//!     KmemCache::new("inode", 64, 8, CacheFlags::NONE, ArenaPages::new(&arena), ThreadCpus)
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
//!   the lockless tid path (`fast_tid.rs`) and sheaves + barn (`sheaves.rs`).
//! * The slab layer both fronts share: slabs with end-token freelists
//!   (`slab.rs`, `freelist.rs`), partial lists, freezing and deactivation
//!   (`partial.rs`), remote frees with a slab-level DW-CAS (`remote.rs`).
//! * Hardening: obfuscated, validated freelist pointers (always), optional
//!   freelist randomisation, fast-path double-free detection; red zones,
//!   poisoning and ownership checks under `debug` (`hardening.rs`).
//! * Counters under `stats` and a `/proc/slabinfo` line (`stats.rs`).
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
//! * [`PageSource`]: where slab pages come from ([`FramePages`] adapts
//!   arch-api's `FrameSource` + `PhysMap`).
//! * The raw lock `R: lock_api::RawMutex` of node lists and the barn
//!   (default `arch_api::sync::DefaultRawMutex`).
//!
//! # Where to start reading
//!
//! `fast_tid.rs` (the fast path and its slow path), then `freelist.rs` and
//! `slab.rs`, then `partial.rs` / `remote.rs`, then `sheaves.rs`.
#![no_std]
#![deny(missing_docs)]

#[cfg(any(feature = "std", kmm_loom))]
extern crate std;

mod cache;
pub mod cpu_local;
mod error;
mod fast_tid;
mod freelist;
mod global_alloc;
pub mod hardening;
mod kmalloc;
mod loom_hooks;
mod page_source;
mod partial;
mod remote;
mod sheaves;
mod slab;
#[doc(hidden)]
pub mod stats;
mod sync;

#[cfg(kmm_loom)]
#[doc(hidden)]
pub mod loom_mutation;

pub use cache::{CacheConfig, CacheFlags, Front, KmemCache};
pub use cpu_local::{CpuLocal, PreemptPoint};
pub use error::{AllocError, CacheError, DestroyError, FreeError};
pub use global_alloc::SlubGlobalAlloc;
pub use kmalloc::{
    KMALLOC_MAX_CACHE_SIZE, KMALLOC_MIN_SIZE, Kmalloc, NR_KMALLOC_CLASSES, kmalloc_index,
};
pub use page_source::{FramePages, PageSource};
pub use stats::{CacheStats, NR_STATS, SlabInfo, StatItem};

#[cfg(feature = "std")]
pub use cpu_local::migrating::MigratingCpus;
#[cfg(feature = "std")]
pub use cpu_local::thread::ThreadCpus;
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

/// Alias of [`DefaultDwCas`] for tests and examples.
#[doc(hidden)]
pub type DwCasUsed = DefaultDwCas;
