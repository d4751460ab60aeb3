//! The slab layer both fronts share (Linux's `kmem_cache_node` side of
//! SLUB): new slabs from the page source with their freelists, the node
//! partial list and the per-CPU partial lists (`partial.rs`), frees that
//! bypass the CPU freelist (`remote.rs`), and returning slabs.
//!
//! The fronts (`tid.rs`, `sheaves.rs`) only call this layer; it knows
//! nothing of them. Its fields are private to this module and its two
//! children, so the invariants of the partial lists (stated in
//! `partial.rs`) are kept here alone.

mod nolock;
mod partial;
mod remote;

pub(crate) use partial::CpuPartial;

use crate::cpu_local::CpuLocal;
use crate::error::{AllocError, FreeError};
use crate::freelist::{Codec, end_token};
use crate::page_source::{PageSource, SlabPages};
use crate::slab::{Counters, Geometry, SLAB_MAGIC, Slab};
use crate::stats::StatItem;
use crate::sync::UnsafeCellPtr;
use arch_api::DwCas;
use arch_api::sync::RawMutex;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;
use partial::Node;

/// splitmix64: mixes seeds into secrets.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The marker a front keeps of the slab layer it works over (it is handed
/// a `&Slabs` on every call rather than holding one); a `fn` type, so the
/// front is `Send` and `Sync` whatever the parameters.
pub(crate) type Over<P, C, D, R> = PhantomData<fn() -> Slabs<P, C, D, R>>;

/// What the slab layer needs to know of a cache's tunables.
pub(crate) struct SlabsConfig {
    /// Empty slabs kept on the node partial list (`min_partial`).
    pub(crate) min_partial: usize,
    /// Frozen slabs a CPU keeps on its partial list.
    pub(crate) cpu_partial: usize,
    /// Shuffle the freelists of new slabs.
    pub(crate) random_freelist: bool,
    /// Mixed into the shuffle.
    pub(crate) seed: u64,
    /// The embedder's hook on new slabs.
    pub(crate) new_slab: Option<crate::cache::NewSlabHook>,
    /// `CacheConfig::fast_path_stats` (read under `stats` only).
    #[cfg_attr(not(feature = "stats"), allow(dead_code))]
    pub(crate) fast_path_stats: bool,
}

/// A cache's slabs: geometry, freelist encoding, page source, CPUs, the node
/// and the counters.
///
/// In declaration order (`repr(C)`): what the fast paths read first (the
/// geometry, its `free` fields at its start, then the CPUs and the
/// counters' switch, which every call reads), so that the fast paths read
/// as few lines of the cache as they can; what slow paths write last.
#[repr(C)]
pub(crate) struct Slabs<P, C, D, R: RawMutex> {
    geo: Geometry,
    cpus: C,
    /// Whether `stat` counts the fast-path items.
    #[cfg(feature = "stats")]
    fast_path_stats: bool,
    #[cfg(feature = "stats")]
    stats: crate::percpu::PerCpu<crate::stats::CpuStats>,
    codec: Codec,
    pages: P,
    min_partial: usize,
    cpu_partial: usize,
    random_freelist: bool,
    new_slab_hook: Option<crate::cache::NewSlabHook>,
    rng: AtomicU64,
    /// `SLAB_MAGIC ^ secret`, in every slab header of this cache.
    magic: u64,
    _cas: PhantomData<D>,
    /// Written by every slow path that takes the lock: on lines of its own,
    /// away from the read-mostly fields every fast path reads.
    node: CachePadded<Node<R>>,
    /// Slabs obtained from the page source and not yet returned.
    nr_slabs: CachePadded<AtomicUsize>,
}

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> Slabs<P, C, D, R> {
    /// The node (its partial list and lock).
    #[cfg(not(kmm_loom))]
    pub(crate) fn node(&self) -> &Node<R> {
        &self.node
    }

    /// The slab layer of a new cache; `None` if the counters' per-CPU array
    /// cannot be allocated (feature `stats`).
    pub(crate) fn new(
        geo: Geometry,
        codec: Codec,
        pages: P,
        cpus: C,
        config: SlabsConfig,
    ) -> Result<Self, (P, C)> {
        #[cfg(feature = "stats")]
        let init = |at: *mut crate::stats::CpuStats, _| {
            // SAFETY: `PerCpu::new` hands out a valid, unused line.
            unsafe { at.write(crate::stats::CpuStats::new()) }
        };
        #[cfg(feature = "stats")]
        let Some(stats) = crate::percpu::PerCpu::new(&pages, cpus.nr_cpus().max(1), init) else {
            return Err((pages, cpus));
        };
        Ok(Self {
            magic: SLAB_MAGIC ^ codec.secret,
            geo,
            codec,
            cpus,
            pages,
            node: CachePadded::new(Node::new()),
            min_partial: config.min_partial,
            cpu_partial: config.cpu_partial,
            random_freelist: config.random_freelist,
            new_slab_hook: config.new_slab,
            nr_slabs: CachePadded::new(AtomicUsize::new(0)),
            rng: AtomicU64::new(mix(config.seed ^ 0x5eed)),
            #[cfg(feature = "stats")]
            stats,
            #[cfg(feature = "stats")]
            fast_path_stats: config.fast_path_stats,
            _cas: PhantomData,
        })
    }

    /// Returns the counters' array (destroy, after every slab is back).
    pub(crate) fn release(&mut self) {
        #[cfg(feature = "stats")]
        // SAFETY: allocated from `self.pages` in `new`; no CPU runs on the
        // cache any more (exclusive access).
        unsafe {
            self.stats.release(&self.pages)
        };
    }

    #[inline(always)]
    pub(crate) fn geo(&self) -> &Geometry {
        &self.geo
    }

    #[inline(always)]
    pub(crate) fn codec(&self) -> &Codec {
        &self.codec
    }

    #[inline(always)]
    pub(crate) fn cpus(&self) -> &C {
        &self.cpus
    }

    #[inline(always)]
    pub(crate) fn pages(&self) -> &P {
        &self.pages
    }

    /// Slabs held from the page source.
    pub(crate) fn nr_slabs(&self) -> usize {
        self.nr_slabs.load(Ordering::Acquire)
    }

    /// Frozen slabs a CPU keeps on its partial list (`cpu_partial`).
    pub(crate) fn cpu_partial(&self) -> usize {
        self.cpu_partial
    }

    /// Bumps counter `item` of CPU `cpu` (nothing without `stats`, nor for
    /// a fast-path item when the cache does not count those).
    #[inline(always)]
    pub(crate) fn stat(&self, cpu: usize, item: StatItem) {
        #[cfg(feature = "stats")]
        if self.fast_path_stats || !item.is_fast_path() {
            self.stats.get(cpu).inc(item);
        }
        #[cfg(not(feature = "stats"))]
        let _ = (cpu, item);
    }

    /// Bumps counter `item` of the CPU the caller runs on (CPU 0 if it has
    /// none outside a guard).
    #[inline(always)]
    pub(crate) fn stat_here(&self, item: StatItem) {
        #[cfg(feature = "stats")]
        self.stat(self.cpus.current_cpu().unwrap_or(0), item);
        #[cfg(not(feature = "stats"))]
        let _ = item;
    }

    /// Every counter summed over CPUs.
    #[cfg(feature = "stats")]
    pub(crate) fn stats(&self) -> crate::stats::CacheStats {
        let mut counts = [0; crate::stats::NR_STATS];
        for cpu in 0..self.cpus.nr_cpus().max(1) {
            self.stats.get(cpu).add_to(&mut counts);
        }
        crate::stats::CacheStats::from_counts(counts)
    }

    /// Whether `p` is inside a slab of this cache: the page source does not
    /// disown it and the slab header carries this cache's magic.
    ///
    /// # Safety
    /// If the page source's direct map cannot tell its pointers from others
    /// (answers `Some` for `p`'s block although it is not its memory), that
    /// block must be mapped memory.
    pub(crate) unsafe fn check_owner(&self, p: usize) -> Result<(), FreeError> {
        let base = self.geo.base_of(p);
        if p == 0 || self.pages.disowns(base) {
            return Err(FreeError::ForeignPointer { ptr: p });
        }
        // SAFETY: the page source owns `base` or the caller vouches that it is
        // mapped; `magic` is a plain field at a fixed offset of the header.
        let magic = unsafe { core::ptr::addr_of!((*(base as *const Slab)).magic).read_volatile() };
        if magic != self.magic {
            return Err(FreeError::ForeignPointer { ptr: p });
        }
        Ok(())
    }

    /// Allocates and initialises a new slab; returns it and its freelist
    /// head (the whole list, which the caller owns: the slab is frozen with
    /// every object counted in use).
    pub(crate) fn new_slab(&self) -> Result<(*mut Slab, u64), AllocError> {
        let g = &self.geo;
        let mem = self
            .pages
            .alloc_pages(g.slab_bytes, g.slab_bytes)
            .ok_or(AllocError::OutOfMemory)?;
        let base = mem.as_ptr() as usize;
        let slab = mem.as_ptr().cast::<Slab>();
        // SAFETY: fresh, exclusively owned, slab_bytes-aligned memory, large
        // enough for the header (the geometry puts objects after it).
        unsafe {
            slab.write(Slab {
                state: arch_api::DwCell::new(arch_api::DoubleWord::new(
                    end_token(base),
                    Counters::new(g.objects, g.objects, true).0,
                )),
                next: UnsafeCellPtr::null(),
                prev: UnsafeCellPtr::null(),
                magic: self.magic,
                on_partial: core::cell::UnsafeCell::new(false),
            })
        };
        #[cfg(feature = "debug")]
        crate::hardening::init_slab(g, base);
        let head = self.build_freelist(base);
        if let Some(hook) = self.new_slab_hook {
            (hook.0)(mem, g.slab_bytes, g.size);
        }
        self.nr_slabs.fetch_add(1, Ordering::AcqRel);
        self.stat_here(StatItem::AllocSlab);
        Ok((slab, head))
    }

    /// Links the objects of a fresh slab, in address order or (with
    /// `RANDOM_FREELIST`) in a random order: a random start and a random
    /// stride coprime with the object count visit every object once.
    fn build_freelist(&self, base: usize) -> u64 {
        let g = &self.geo;
        let n = g.objects;
        let (mut idx, stride) = if self.random_freelist && n > 1 {
            let r = mix(self.rng.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed));
            let mut stride = (r >> 32) as usize % n;
            while stride == 0 || gcd(stride, n) != 1 {
                stride = (stride + 1) % n;
            }
            (r as usize % n, stride)
        } else {
            (0, 1)
        };
        let head = g.object(base, idx);
        let mut cur = head;
        for _ in 1..n {
            idx = (idx + stride) % n;
            let next = g.object(base, idx);
            // SAFETY: `cur` is an object of the fresh slab we own.
            unsafe { self.codec.set(cur, next as u64) };
            cur = next;
        }
        // SAFETY: as above.
        unsafe { self.codec.set(cur, end_token(base)) };
        head as u64
    }

    /// Returns a slab to the page source (`discard_slab`). The slab must be
    /// empty and on no list.
    fn discard_slab(&self, slab: *mut Slab) {
        // SAFETY: the caller guarantees the slab is empty, unreachable from
        // every list and CPU, so we own it; it was written in `new_slab`.
        unsafe {
            core::ptr::drop_in_place(slab);
            self.pages
                .free_pages(NonNull::new_unchecked(slab.cast()), self.geo.slab_bytes);
        }
        self.nr_slabs.fetch_sub(1, Ordering::AcqRel);
        self.stat_here(StatItem::FreeSlab);
    }

    /// Free objects on the node partial list (exact once no CPU holds slabs).
    pub(crate) fn free_objects(&self) -> usize {
        self.node.partial_summary().1
    }

    /// Node partial slabs and the free objects on them (for slabinfo).
    pub(crate) fn partial_summary(&self) -> (usize, usize) {
        self.node.partial_summary()
    }
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
