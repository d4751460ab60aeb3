//! `kmem_cache`: one object size, its front and its slab layer.
//!
//! Start here: [`KmemCache::new`], [`KmemCache::alloc`], [`KmemCache::free`],
//! [`KmemCache::shrink`], [`KmemCache::destroy`]. The front (tid fast path or
//! sheaves) is chosen per cache with [`CacheFlags::SHEAVES`]; this file only
//! dispatches to it (one mode byte per operation) and owns the lifecycle.
//! Both fronts call the slab layer (`slabs/`).

use crate::barn::Barn;
use crate::cpu_local::CpuLocal;
use crate::deferred::Deferred;
use crate::error::{CacheError, DestroyError};
use crate::freelist::Codec;
use crate::mem::PlatformMem;
use crate::page_source::SlabPages;
use crate::sheaves::{Heads, SheafFront};
use crate::slab::Geometry;
use crate::slabs::{Slabs, SlabsConfig, mix};
use crate::stats::SlabInfo;
use crate::tid::TidFront;
use arch_api::Platform;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

mod alloc_free;
mod bulk;
mod deferred;
#[cfg(not(kmm_loom))]
mod fork;
mod nolock;
mod prefill;
mod resize;

pub use prefill::Prefilled;

bitflags::bitflags! {
    /// Per-cache options (Linux's `SLAB_*` flags that matter here). The
    /// empty set is the default: the tid front with ordered freelists.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct CacheFlags: u32 {
        /// Use the sheaves front instead of the tid fast path.
        const SHEAVES = 1;
        /// Randomise the freelist order of new slabs
        /// (`CONFIG_SLAB_FREELIST_RANDOM`).
        const RANDOM_FREELIST = 2;
    }
}

/// Tunables, with Linux's defaults where it has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// Empty slabs kept on the node partial list before returning them
    /// (`min_partial`, Linux: 5..10).
    pub min_partial: usize,
    /// Frozen slabs a CPU keeps on its partial list (`cpu_partial_slabs`).
    pub cpu_partial: usize,
    /// Objects per slab at most (tests use 2–4 to keep loom models small).
    pub max_objects: usize,
    /// Object pointers per sheaf (sheaves front).
    pub sheaf_capacity: usize,
    /// Full sheaves the barn keeps before a free flushes to slabs.
    pub barn_max_full: usize,
    /// Empty sheaves the barn keeps.
    pub barn_max_empty: usize,
    /// Seed mixed into the freelist secret and the shuffle (0: derived from
    /// addresses and a counter).
    pub seed: u64,
    /// Called for every new slab of the cache (none by default): see
    /// [`NewSlabHook`].
    pub new_slab: Option<NewSlabHook>,
    /// Count `alloc_fastpath` and `free_fastpath` under feature `stats`
    /// (default: yes; the other counters are always counted). Each count
    /// is a load and a store of a per-CPU counter on every fast-path hit: a
    /// second chain of dependent memory operations beside the front's own,
    /// which a tight `malloc`/`free` loop pays for (BENCHMARKS.md, session
    /// 13: glibc-simple 14 % faster without). Linux counts them only under
    /// `CONFIG_SLUB_STATS`.
    pub fast_path_stats: bool,
}

/// What an embedder learns of each new slab: its first byte, its size in
/// bytes (a power of two; the slab is aligned to it) and the cache's object
/// size. Called once the slab's pages are allocated and before any of its
/// objects is handed out, so whoever gets an object from it finds what the
/// hook recorded. Linux marks the slab's folio at that point
/// (`allocate_slab`); an embedder that must tell a pointer's cache without
/// asking slub-core (a C `free`, which gets no size) fills its own table
/// here instead of on every allocation.
///
/// It runs on the allocation's slow path, possibly with the CPU pinned and
/// a node lock held: it must not allocate from the cache, nor block.
///
/// ```
/// use core::ptr::NonNull;
/// use core::sync::atomic::{AtomicUsize, Ordering};
/// use slub_core::{CacheConfig, NewSlabHook};
///
/// static SLAB_BYTES: AtomicUsize = AtomicUsize::new(0);
/// fn note(_slab: NonNull<u8>, bytes: usize, _object_size: usize) {
///     SLAB_BYTES.fetch_add(bytes, Ordering::Relaxed);
/// }
/// let config = CacheConfig {
///     new_slab: Some(NewSlabHook(note)),
///     ..CacheConfig::default()
/// };
/// # let _ = config;
/// ```
#[derive(Clone, Copy)]
pub struct NewSlabHook(pub fn(slab: NonNull<u8>, bytes: usize, object_size: usize));

impl PartialEq for NewSlabHook {
    fn eq(&self, other: &Self) -> bool {
        // The same function (by address; a config compares equal to its copy).
        self.0 as usize == other.0 as usize
    }
}

impl Eq for NewSlabHook {}

impl core::fmt::Debug for NewSlabHook {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "NewSlabHook({:#x})", self.0 as usize)
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            min_partial: 5,
            cpu_partial: 2,
            max_objects: usize::MAX,
            sheaf_capacity: 32,
            barn_max_full: 10,
            barn_max_empty: 20,
            seed: 0,
            new_slab: None,
            fast_path_stats: true,
        }
    }
}

/// A SLUB cache of fixed-size objects (`struct kmem_cache`) on the
/// platform `K`: slab pages from `K::Mem`, the CPU from `K::Cpu`, the fast
/// path's `K::DwCas`, node lists and barn under `K::Lock`.
#[repr(C)]
pub struct KmemCache<K: Platform> {
    /// First, so that `&self.slabs` is `self`: the calls from the fronts
    /// into the slab layer need no address computation.
    slabs: Slabs<PlatformMem<K>, K::Cpu, K::DwCas, K::Lock>,
    /// The front and whether the cache is destroyed, in the one byte every
    /// `alloc`/`free` reads first: [`MODE_TID`], [`MODE_SHEAVES`] or
    /// [`MODE_DESTROYED`].
    mode: AtomicU8,
    /// [`LEAF_ON`] while the sheaves front's fast path may run as bare leaf
    /// code, with no counter to bump ([`Kmalloc::try_alloc_class`]
    /// tests this byte alone); [`LEAF_OFF`] on the tid front, with the
    /// fast-path counters on, and once destroyed.
    ///
    /// [`Kmalloc::try_alloc_class`]: crate::Kmalloc::try_alloc_class
    leaf: AtomicU8,
    /// Has no per-CPU array on a tid cache. Its fast-path fields (the
    /// per-CPU array and the sheaf capacity) share one line, ahead of the
    /// barn.
    sheaves: SheafFront<PlatformMem<K>, K::Cpu, K::DwCas, K::Lock>,
    tid: TidFront<PlatformMem<K>, K::Cpu, K::DwCas, K::Lock>,
    flags: CacheFlags,
    name: &'static str,
    nr_cpus: usize,
    /// Objects whose `free_nolock` found the node lock held: a lock-free
    /// stack (0: empty) drained by the next slow path (`nolock.rs`).
    nolock_deferred: CachePadded<AtomicUsize>,
    /// `free_deferred`'s per-CPU batches and pending list (`deferred.rs`).
    /// These two are written by their (rare) paths: on lines of their own,
    /// as the node and the barn are, away from what the fast paths read.
    deferred: CachePadded<Deferred<K::Lock>>,
}

// SAFETY: all shared state is behind atomics, DW-CAS cells, the node lock,
// the barn lock or the CpuLocal guard (see each field's users); the raw
// pointers refer to memory the cache owns.
unsafe impl<K: Platform> Send for KmemCache<K>
where
    K::Mem: Send,
    K::Cpu: Send,
    K::Lock: Send,
{
}
// SAFETY: as above.
unsafe impl<K: Platform> Sync for KmemCache<K> where K::Lock: Sync + Send {}

impl<K: Platform> core::fmt::Debug for KmemCache<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KmemCache")
            .field("name", &self.name)
            .field("size", &self.slabs.geo().size)
            .field("slot", &self.slabs.geo().slot)
            .field("objects", &self.slabs.geo().objects)
            .field("slab_bytes", &self.slabs.geo().slab_bytes)
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

static CACHE_SEQ: AtomicU64 = AtomicU64::new(0);

/// `KmemCache::mode`: a live cache with the sheaves front (0: the front
/// with no atomic instruction gets the shortest dispatch, a zero test).
const MODE_SHEAVES: u8 = 0;
/// `KmemCache::mode`: a live cache with the tid front.
const MODE_TID: u8 = 1;
/// `KmemCache::mode`: destroyed.
const MODE_DESTROYED: u8 = 2;
/// `KmemCache::leaf`: the leaf may run.
const LEAF_ON: u8 = 1;
/// `KmemCache::leaf`: it may not.
const LEAF_OFF: u8 = 0;

impl<K: Platform> KmemCache<K> {
    /// `kmem_cache_create`: a cache of `size`-byte objects aligned to `align`
    /// (a power of two; at least 8 is used), with default tunables, its
    /// pages from `mem` and its CPU from `cpus`.
    pub fn new(
        name: &'static str,
        size: usize,
        align: usize,
        flags: CacheFlags,
        mem: K::Mem,
        cpus: K::Cpu,
    ) -> Result<Self, CacheError> {
        Self::with_config(name, size, align, flags, mem, cpus, CacheConfig::default())
    }

    /// As [`new`](Self::new), with explicit tunables.
    pub fn with_config(
        name: &'static str,
        size: usize,
        align: usize,
        flags: CacheFlags,
        mem: K::Mem,
        cpus: K::Cpu,
        config: CacheConfig,
    ) -> Result<Self, CacheError> {
        // SAFETY: no shared column: the cache allocates its own lines.
        unsafe { Self::build(name, size, align, flags, mem, cpus, config, None) }
    }

    /// [`with_config`](Self::with_config), the per-CPU sheaves lines in
    /// `column` of a shared area if given (`Kmalloc`'s).
    ///
    /// # Safety
    /// A `column` is as `SheafLines::column` requires, for at least the
    /// backend's `nr_cpus` CPUs.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn build(
        name: &'static str,
        size: usize,
        align: usize,
        flags: CacheFlags,
        mem: K::Mem,
        cpus: K::Cpu,
        config: CacheConfig,
        column: Option<Heads>,
    ) -> Result<Self, CacheError> {
        let pages = PlatformMem::<K>(mem);
        if !align.is_power_of_two() {
            return Err(CacheError::BadAlign);
        }
        let page = pages.page_size();
        if size == 0 || size > (page << crate::slab::MAX_ORDER) {
            return Err(CacheError::BadSize);
        }
        if align > page << crate::slab::MAX_ORDER {
            return Err(CacheError::BadAlign);
        }
        let align = align.max(8);
        let (slot, fp_off) = crate::hardening::layout(size, align);
        let nr_cpus = cpus.nr_cpus().max(1);
        let geo = Geometry::new(
            size,
            slot,
            fp_off,
            align,
            page,
            config.max_objects.max(1),
            crate::slab::min_objects(nr_cpus),
        )
        .ok_or(CacheError::BadSize)?;
        let sheaves_on = flags.contains(CacheFlags::SHEAVES);
        // The per-CPU arrays come first: the tid array's address seeds the
        // secret, and the slab layer takes `pages` by value after them.
        let Some(mut tid) = TidFront::new(&pages, nr_cpus) else {
            return Err(CacheError::OutOfMemory);
        };
        let barn = Barn::new(
            config.sheaf_capacity,
            config.barn_max_full,
            config.barn_max_empty,
        );
        // SAFETY: the caller's contract for `column`.
        let sheaves = unsafe { SheafFront::new(&pages, nr_cpus, sheaves_on, barn, column) };
        let Some(mut sheaves) = sheaves else {
            // SAFETY: just allocated from `pages`; nothing uses it.
            unsafe { tid.release(&pages) };
            return Err(CacheError::OutOfMemory);
        };
        let seq = CACHE_SEQ.fetch_add(1, Ordering::Relaxed);
        let seed = mix(config.seed ^ mix(tid.addr() as u64 ^ seq.rotate_left(32)));
        #[cfg(all(feature = "std", not(kmm_loom), not(miri)))]
        let seed = seed
            ^ mix(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64));
        let secret = mix(seed) | 1;
        let slabs = Slabs::new(
            geo,
            Codec { secret, fp_off },
            pages,
            cpus,
            SlabsConfig {
                min_partial: config.min_partial,
                cpu_partial: config.cpu_partial,
                random_freelist: flags.contains(CacheFlags::RANDOM_FREELIST),
                seed,
                new_slab: config.new_slab,
                fast_path_stats: config.fast_path_stats,
            },
        );
        let slabs = match slabs {
            Ok(s) => s,
            Err((pages, _)) => {
                // SAFETY: both allocated from `pages` above; nothing uses
                // them.
                unsafe {
                    sheaves.release(&pages);
                    tid.release(&pages);
                }
                return Err(CacheError::OutOfMemory);
            }
        };
        Ok(Self {
            mode: AtomicU8::new(if sheaves_on { MODE_SHEAVES } else { MODE_TID }),
            leaf: AtomicU8::new(
                if sheaves_on && !(cfg!(feature = "stats") && config.fast_path_stats) {
                    LEAF_ON
                } else {
                    LEAF_OFF
                },
            ),
            tid,
            sheaves,
            slabs,
            flags,
            name,
            nr_cpus,
            nolock_deferred: CachePadded::new(AtomicUsize::new(0)),
            deferred: CachePadded::new(Deferred::new(nr_cpus)),
        })
    }

    /// Whether [`destroy`](Self::destroy) has succeeded.
    pub(crate) fn is_destroyed(&self) -> bool {
        self.mode.load(Ordering::Relaxed) == MODE_DESTROYED
    }

    /// Whether the sheaves front's fast path may run as bare leaf code
    /// (the `leaf` byte).
    pub(crate) fn leaf_on(&self) -> bool {
        self.leaf.load(Ordering::Relaxed) == LEAF_ON
    }

    /// Whether `p` is an object boundary inside a slab of this cache's
    /// geometry: the leaf free's check.
    #[inline(always)]
    pub(crate) fn is_object_in_own_slab(&self, p: usize) -> bool {
        self.slabs.geo().is_object_in_own_slab(p)
    }

    /// The cache's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The object size asked for.
    pub fn object_size(&self) -> usize {
        self.slabs.geo().size
    }

    /// The stride between objects (size, alignment and debug metadata).
    pub fn slot_size(&self) -> usize {
        self.slabs.geo().slot
    }

    /// Objects per slab.
    pub fn objects_per_slab(&self) -> usize {
        self.slabs.geo().objects
    }

    /// Bytes per slab (slabs are aligned to this).
    pub fn slab_bytes(&self) -> usize {
        self.slabs.geo().slab_bytes
    }

    /// The flags the cache was created with; the front serving it is
    /// `flags().contains(CacheFlags::SHEAVES)` (sheaves) or not (tid).
    pub fn flags(&self) -> CacheFlags {
        self.flags
    }

    /// The tid step: a power of two at least the number of CPUs (feature
    /// `testing`; not part of the API).
    #[cfg(feature = "testing")]
    pub fn tid_step(&self) -> u64 {
        self.tid.tid_step()
    }

    /// The CPU-local access the cache was created with.
    pub fn cpus(&self) -> &K::Cpu {
        self.slabs.cpus()
    }

    /// The memory handle the cache was created with.
    pub fn mem(&self) -> &K::Mem {
        self.slabs.pages().get()
    }

    /// Slabs currently held from `K::Mem`.
    pub fn nr_slabs(&self) -> usize {
        self.slabs.nr_slabs()
    }

    /// The `(freelist, tid)` pair of CPU `cpu` of the tid front (feature
    /// `testing`; not part of the API).
    #[cfg(feature = "testing")]
    pub fn cpu_state(&self, cpu: usize) -> Option<arch_api::DoubleWord> {
        (cpu < self.nr_cpus && !self.is_destroyed()).then(|| self.tid.cpu_state(cpu))
    }

    /// Number of CPU slots.
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    /// `kmem_cache_shrink`: flushes every CPU's slab, partial slabs,
    /// detached freelist and sheaves that the backend's
    /// [`on_each_cpu`](crate::CpuLocal::on_each_cpu) reaches (Linux's
    /// `flush_all`; the calling CPU's only, with a backend that keeps the
    /// default), then returns every empty slab on the node partial list to
    /// the platform's memory. Returns how many slabs fewer the cache holds
    /// afterwards: those the flushes freed and those the node list gave
    /// back (a slab another CPU takes meanwhile counts against it).
    ///
    /// Not from a pinned section or an interrupt handler: the flush of
    /// another CPU may wait for that CPU.
    pub fn shrink(&self) -> usize
    where
        // Other CPUs run the flush of their state: the cache is shared.
        Self: Sync,
    {
        if self.is_destroyed() {
            return 0;
        }
        let before = self.slabs.nr_slabs();
        self.drain_nolock_frees();
        self.slabs.cpus().on_each_cpu(&|cpu| self.flush_cpu(cpu));
        self.sheaves.flush_barn(&self.slabs);
        self.slabs.discard_empty_partials();
        before.saturating_sub(self.slabs.nr_slabs())
    }

    /// `kmem_cache_destroy`. With objects still allocated it fails with
    /// [`DestroyError::LiveObjects`] naming how many, freeing nothing under
    /// them (the cache stays usable). Otherwise every slab page, the per-CPU
    /// array and the sheaves go back to the platform's memory; later calls fail
    /// with `Destroyed`. With deferred frees pending it fails with
    /// [`DestroyError::DeferredPending`] (use
    /// [`destroy_deferred`](Self::destroy_deferred) to wait for them).
    pub fn destroy(&mut self) -> Result<(), DestroyError> {
        if self.is_destroyed() {
            return Err(DestroyError::AlreadyDestroyed);
        }
        if self.deferred.count() != 0 {
            return Err(DestroyError::DeferredPending {
                objects: self.deferred.count(),
            });
        }
        self.drain_nolock_frees();
        // Exclusive access: no CPU runs on this cache, so every CPU's state
        // can be flushed from here (what Linux does with an IPI per CPU).
        for cpu in 0..self.nr_cpus {
            self.flush_cpu(cpu);
        }
        self.sheaves.flush_barn(&self.slabs);
        let free = self.slabs.free_objects();
        let held = self.slabs.nr_slabs() * self.slabs.geo().objects;
        if held > free {
            return Err(DestroyError::LiveObjects {
                remaining: held - free,
            });
        }
        self.slabs.discard_empty_partials();
        let left = self.slabs.nr_slabs();
        if left != 0 {
            return Err(DestroyError::LeakedSlabs { slabs: left });
        }
        self.leaf.store(LEAF_OFF, Ordering::Release);
        self.mode.store(MODE_DESTROYED, Ordering::Release);
        let pages = self.slabs.pages();
        // SAFETY: exclusive access, every CPU and the barn flushed, every
        // slab back: nothing uses the per-CPU arrays or the sheaf pool, which
        // came from these pages.
        unsafe {
            self.deferred.release(pages);
            self.sheaves.release(pages);
            self.tid.release(pages);
        }
        self.slabs.release();
        Ok(())
    }

    /// Flushes CPU `cpu`'s sheaves (on a sheaves cache), slab and partial
    /// slabs. Under the guard of `cpu`, or with exclusive access.
    fn flush_cpu(&self, cpu: usize) {
        if self.flags.contains(CacheFlags::SHEAVES) {
            self.sheaves.flush_cpu(&self.tid, &self.slabs, cpu);
        }
        self.tid.flush_cpu(&self.slabs, cpu);
    }

    /// The counters, summed over CPUs.
    #[cfg(feature = "stats")]
    pub fn stats(&self) -> crate::stats::CacheStats {
        self.slabs.stats()
    }

    /// This cache's `/proc/slabinfo` line. Objects on CPU freelists, per-CPU
    /// partial slabs and sheaves count as active, as in Linux.
    pub fn slabinfo(&self) -> SlabInfo {
        let (partial, free) = self.slabs.partial_summary();
        let slabs = self.slabs.nr_slabs();
        let geo = self.slabs.geo();
        let num_objs = slabs * geo.objects;
        SlabInfo {
            name: self.name,
            active_objs: num_objs.saturating_sub(free),
            num_objs,
            objsize: geo.slot,
            objperslab: geo.objects,
            pagesperslab: geo.slab_bytes / self.slabs.pages().page_size(),
            active_slabs: slabs,
            num_slabs: slabs,
            partial_slabs: partial,
        }
    }
}

impl<K: Platform> Drop for KmemCache<K> {
    /// Destroys the cache if that is still possible; with live objects the
    /// slabs are leaked rather than freed under them.
    fn drop(&mut self) {
        if !self.is_destroyed() {
            let _ = self.destroy();
        }
    }
}
