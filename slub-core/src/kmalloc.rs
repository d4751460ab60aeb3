//! kmalloc: power-of-two size classes 8, 16, …, 16384 served from slabs
//! (objects naturally aligned, slabs of a suitable order, so a 16 KiB object
//! costs a slab operation, not a page-allocator call: no cliff at 16384);
//! larger sizes go straight to the platform's frames.

use crate::cache::{CacheConfig, CacheFlags, KmemCache};
use crate::error::{AllocError, CacheError, DestroyError, FreeError};
use crate::mem::PlatformMem;
use crate::page_source::SlabPages;
use crate::sheaves::{Heads, ROW_LINES, SheafArea};
use arch_api::CpuLocal;
use arch_api::Platform;
use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

mod buckets;
mod deferred;
#[cfg(not(kmm_loom))]
mod fork;
mod krealloc;
pub(crate) mod large_list;
mod leaf;
mod nolock;
mod random;
mod random_site;

pub use buckets::KmemBuckets;
pub use random::{NR_RANDOM_COPIES, RandomKmalloc};
pub use random_site::RandomSite;

/// Smallest class.
pub const KMALLOC_MIN_SIZE: usize = 8;
/// Largest size served from slabs (`KMALLOC_MAX_CACHE_SIZE`).
pub const KMALLOC_MAX_CACHE_SIZE: usize = 16384;
/// Number of classes.
pub const NR_KMALLOC_CLASSES: usize = 12;

const NAMES: [&str; NR_KMALLOC_CLASSES] = [
    "kmalloc-8",
    "kmalloc-16",
    "kmalloc-32",
    "kmalloc-64",
    "kmalloc-128",
    "kmalloc-256",
    "kmalloc-512",
    "kmalloc-1k",
    "kmalloc-2k",
    "kmalloc-4k",
    "kmalloc-8k",
    "kmalloc-16k",
];

// Every class has a column in the shared sheaves area's rows.
const _: () = assert!(NR_KMALLOC_CLASSES <= ROW_LINES);

/// The kmalloc caches and the large-allocation path, on the platform `K`.
pub struct Kmalloc<K: Platform> {
    /// What the leaf fast paths read besides the class's sheaves line.
    leaf: leaf::LeafLine<K::Cpu>,
    caches: [KmemCache<K>; NR_KMALLOC_CLASSES],
    /// The caches' per-CPU sheaves lines, a row per CPU (none on the tid
    /// front): the fast paths compute a class's line from the class
    /// instead of loading it from the cache. After `caches`, so that it is
    /// dropped after them.
    sheaf_area: SheafArea<PlatformMem<K>>,
    pages: PlatformMem<K>,
    /// Written by every large allocation and free: on lines of its own.
    large_bytes: CachePadded<AtomicUsize>,
    /// Large blocks given to `free_deferred`, waiting for their grace
    /// period (`deferred.rs`).
    large_deferred: large_list::LargeList<deferred::LargeRecord>,
}

impl<K: Platform> core::fmt::Debug for Kmalloc<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Kmalloc")
            .field("large_bytes", &self.large_bytes())
            .finish_non_exhaustive()
    }
}

/// The class index for `layout`, or `None` for a large allocation.
#[inline]
pub fn kmalloc_index(size: usize, align: usize) -> Option<usize> {
    // `align` is a power of two, so `need >= 1`; `(need - 1) | 7` folds the
    // minimum size into the `fls` (one instruction fewer on every kmalloc).
    let need = size.max(align).max(1);
    if need > KMALLOC_MAX_CACHE_SIZE {
        return None;
    }
    Some((usize::BITS - ((need - 1) | (KMALLOC_MIN_SIZE - 1)).leading_zeros()) as usize - 3)
}

impl<K: Platform> Kmalloc<K>
where
    K::Mem: Clone,
    K::Cpu: Clone,
{
    /// Creates the twelve caches (`flags` for each, e.g. the sheaves front).
    /// Each cache holds a copy of the handles `mem` and `cpus` (a reference
    /// or a zero-sized type, as a platform's handles are).
    pub fn new(mem: K::Mem, cpus: K::Cpu, flags: CacheFlags) -> Result<Self, CacheError> {
        Self::with_names(NAMES, mem, cpus, flags, |_| CacheConfig::default())
    }

    /// As [`new`](Self::new), each cache with the tunables `config(size)`
    /// for its object size (a hosted malloc may want bigger per-CPU caches
    /// than a kernel, scaled by size: kmm-malloc).
    pub fn with_config(
        mem: K::Mem,
        cpus: K::Cpu,
        flags: CacheFlags,
        config: impl Fn(usize) -> CacheConfig,
    ) -> Result<Self, CacheError> {
        Self::with_names(NAMES, mem, cpus, flags, config)
    }

    /// As [`with_config`](Self::with_config), the caches named `names` (bucket sets).
    fn with_names(
        names: [&'static str; NR_KMALLOC_CLASSES],
        mem: K::Mem,
        cpus: K::Cpu,
        flags: CacheFlags,
        config: impl Fn(usize) -> CacheConfig,
    ) -> Result<Self, CacheError> {
        let pages = PlatformMem::<K>(mem.clone());
        let sheaf_area = if flags.contains(CacheFlags::SHEAVES) {
            SheafArea::new(pages, cpus.nr_cpus().max(1)).ok_or(CacheError::OutOfMemory)?
        } else {
            SheafArea::none(pages)
        };
        let made: [Result<KmemCache<K>, CacheError>; NR_KMALLOC_CLASSES] =
            core::array::from_fn(|i| {
                let size = KMALLOC_MIN_SIZE << i;
                let column = sheaf_area.is_some().then(|| sheaf_area.heads(i));
                // SAFETY: column `i` of a live area sized for the backend's
                // CPUs, used by this cache only; the area is kept beside the
                // caches and dropped after them.
                unsafe {
                    KmemCache::build(
                        names[i],
                        size,
                        size,
                        flags,
                        mem.clone(),
                        cpus.clone(),
                        config(size),
                        column,
                    )
                }
            });
        if let Some(Err(e)) = made.iter().find(|r| r.is_err()) {
            return Err(*e);
        }
        let caches = made.map(|r| match r {
            Ok(c) => c,
            Err(_) => unreachable!("checked above"),
        });
        let leaf = leaf::LeafLine::new(
            cpus,
            sheaf_area.is_some().then(|| sheaf_area.heads(0)),
            caches.iter().all(|c| c.leaf_on()),
        );
        Ok(Self {
            leaf,
            caches,
            sheaf_area,
            pages: PlatformMem(mem),
            large_bytes: CachePadded::new(AtomicUsize::new(0)),
            large_deferred: large_list::LargeList::new(),
        })
    }
}

impl<K: Platform> Kmalloc<K> {
    /// The caches, smallest first.
    pub fn caches(&self) -> &[KmemCache<K>] {
        &self.caches
    }

    /// [`KmemCache::shrink`] on every class (each flushes every CPU its
    /// backend's [`on_each_cpu`](crate::CpuLocal::on_each_cpu) reaches):
    /// how many slabs went back to the platform's memory. What an OS calls
    /// under memory pressure; not from a pinned section or an interrupt
    /// handler.
    pub fn shrink(&self) -> usize
    where
        KmemCache<K>: Sync,
    {
        self.caches.iter().map(|c| c.shrink()).sum()
    }

    /// Bytes of large allocations outstanding.
    pub fn large_bytes(&self) -> usize {
        self.large_bytes.load(Ordering::Relaxed)
    }

    fn large_layout(&self, layout: Layout) -> Option<(usize, usize)> {
        let page = self.pages.page_size();
        let size = layout.size().max(1).checked_next_multiple_of(page)?;
        Some((size, layout.align().max(page)))
    }

    /// Where class `i`'s sheaves lines are: computed from `i` on the
    /// shared area, no load that waits for the class (`sheaves/lines.rs`).
    /// On the tid front there is no area and the caches never look at it.
    #[inline(always)]
    fn heads(&self, i: usize) -> Heads {
        self.sheaf_area.heads(i)
    }

    /// An object of class `i` ([`kmalloc_index`]'s answer for the size):
    /// what [`alloc`](Self::alloc) does for a small size, for a caller that
    /// already knows the class (a table of classes, as kmm-malloc's).
    ///
    /// # Panics
    /// If `i` is not below [`NR_KMALLOC_CLASSES`].
    #[inline(always)]
    pub fn alloc_class(&self, i: usize) -> Result<NonNull<u8>, AllocError> {
        let c = &self.caches[i];
        // SAFETY: class `i`'s lines (`heads`).
        unsafe { c.alloc_at(|| self.heads(i)) }
    }

    /// Frees an object of class `i`.
    ///
    /// # Safety
    /// `ptr` was returned by [`alloc_class`](Self::alloc_class) with `i` or
    /// by [`alloc`](Self::alloc) with a layout of class `i`, and is not used
    /// afterwards; the checks of [`KmemCache::free`] apply.
    ///
    /// # Panics
    /// If `i` is not below [`NR_KMALLOC_CLASSES`].
    #[inline(always)]
    pub unsafe fn free_class(&self, i: usize, ptr: NonNull<u8>) -> Result<(), FreeError> {
        let c = &self.caches[i];
        // SAFETY: the caller's contract; class `i`'s lines (`heads`).
        unsafe { c.free_at(ptr, || self.heads(i)) }
    }

    /// The leaf of [`alloc_class`](Self::alloc_class)'s fast path and
    /// nothing else: on the sheaves front, with a backend that pins for free
    /// or has a guard-free step (an rseq section), one pop from the CPU's
    /// main sheaf. `None` whenever the caller must call `alloc_class`: an
    /// empty sheaf, a sheaf that a holder of the CPU's guard is changing,
    /// the tid front (whose fast path is out of line anyway), a backend
    /// that needs the CPU's guard, the fast-path counters on
    /// ([`CacheConfig::fast_path_stats`] under `stats`: `alloc_class`
    /// counts), `debug`.
    ///
    /// It makes no call, so a caller that inlines it, and turns a `None`
    /// into one tail call, needs no stack frame on its fast path
    /// (kmm-malloc's `malloc`; BENCHMARKS.md, session 19). With a backend
    /// that has guard-free steps it reads one line shared by every class
    /// (whether the leaf may run, the CPUs, where the sheaves are), the
    /// class's sheaves line and the slot: no line of the class's cache
    /// (BENCHMARKS.md, session 20).
    ///
    /// # Panics
    /// If `i` is not below [`NR_KMALLOC_CLASSES`].
    ///
    /// [`CacheConfig::fast_path_stats`]: crate::CacheConfig::fast_path_stats
    #[inline(always)]
    pub fn try_alloc_class(&self, i: usize) -> Option<NonNull<u8>> {
        let c = &self.caches[i];
        if <K::Cpu as CpuLocal>::HAS_PINNED_CPU {
            // SAFETY: class `i`'s lines (`heads`).
            return unsafe { c.alloc_leaf(|| self.heads(i)) };
        }
        self.leaf
            .pop(i)
            // SAFETY: objects are inside slab memory, never at address 0.
            .map(|p| unsafe { NonNull::new_unchecked(p as *mut u8) })
    }

    /// The leaf of [`free_class`](Self::free_class)'s fast path with its
    /// checks, as [`try_alloc_class`](Self::try_alloc_class): `true` if
    /// `ptr` was freed; `false` when the caller must call `free_class`
    /// (which starts over and reports any error).
    ///
    /// # Safety
    /// As [`free_class`](Self::free_class).
    ///
    /// # Panics
    /// If `i` is not below [`NR_KMALLOC_CLASSES`].
    #[inline(always)]
    pub unsafe fn try_free_class(&self, i: usize, ptr: NonNull<u8>) -> bool {
        let c = &self.caches[i];
        let p = ptr.as_ptr() as usize;
        if <K::Cpu as CpuLocal>::HAS_PINNED_CPU {
            // SAFETY: the caller's contract; class `i`'s lines (`heads`).
            return unsafe { c.free_leaf(p, || self.heads(i)) };
        }
        // SAFETY: the caller's contract: an object of class `i`, which the
        // boundary check confirms is not inside one.
        c.is_object_in_own_slab(p) && unsafe { self.leaf.push(i, p) }
    }

    /// `kmalloc`.
    #[inline(always)]
    pub fn alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        match kmalloc_index(layout.size(), layout.align()) {
            // Under `debug` the size asked for is recorded: the bytes past
            // it are red zone.
            #[cfg(feature = "debug")]
            Some(i) => self.caches[i].alloc().inspect(|&p| {
                self.caches[i].set_requested_size(p, layout.size());
            }),
            #[cfg(not(feature = "debug"))]
            Some(i) => self.alloc_class(i),
            None => {
                // As `KmemCache::alloc`'s slow path: the error comes back
                // through `err`, so no path returns the `Result` in memory
                // (which would make the caches' fast paths store theirs too).
                let mut err = AllocError::OutOfMemory;
                match self.alloc_large_into(layout, &mut err) {
                    Some(p) => Ok(p),
                    None => Err(err),
                }
            }
        }
    }

    // Out of line so that `alloc` stays small enough to inline into callers.
    #[inline(never)]
    fn alloc_large_into(&self, layout: Layout, err: &mut AllocError) -> Option<NonNull<u8>> {
        self.alloc_large(layout).map_err(|e| *err = e).ok()
    }

    #[inline]
    fn alloc_large(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let (size, align) = self.large_layout(layout).ok_or(AllocError::BadLayout)?;
        let p = self
            .pages
            .alloc_pages(size, align)
            .ok_or(AllocError::OutOfMemory)?;
        self.large_bytes.fetch_add(size, Ordering::Relaxed);
        Ok(p)
    }

    /// `kmalloc` with a caller key, for code written against both this and
    /// [`RandomKmalloc`]: without the random copies the key is ignored and
    /// this is [`alloc`](Self::alloc), instruction for instruction.
    #[inline(always)]
    pub fn alloc_caller(&self, layout: Layout, caller: usize) -> Result<NonNull<u8>, AllocError> {
        let _ = caller;
        self.alloc(layout)
    }

    /// [`free`](Self::free), the key ignored (see
    /// [`alloc_caller`](Self::alloc_caller)).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(always)]
    pub unsafe fn free_caller(
        &self,
        ptr: NonNull<u8>,
        layout: Layout,
        caller: usize,
    ) -> Result<(), FreeError> {
        let _ = caller;
        // SAFETY: the caller's contract.
        unsafe { self.free(ptr, layout) }
    }

    /// `kfree`, given the layout it was allocated with.
    ///
    /// # Safety
    /// `ptr` was returned by [`alloc`](Self::alloc) with `layout` (for the
    /// class sizes, the checks of [`KmemCache::free`] apply and bad pointers
    /// are refused with an error; a large block must be exactly one that was
    /// allocated), and is not used afterwards.
    #[inline(always)]
    pub unsafe fn free(&self, ptr: NonNull<u8>, layout: Layout) -> Result<(), FreeError> {
        match kmalloc_index(layout.size(), layout.align()) {
            // SAFETY: the caller's contract.
            Some(i) => unsafe { self.free_class(i, ptr) },
            // SAFETY: the caller's contract.
            None => unsafe { self.free_large(ptr, layout) },
        }
    }

    /// # Safety
    /// As [`free`](Self::free), for a large block.
    #[inline(never)]
    unsafe fn free_large(&self, ptr: NonNull<u8>, layout: Layout) -> Result<(), FreeError> {
        let Some((size, align)) = self.large_layout(layout) else {
            return Err(FreeError::ForeignPointer {
                ptr: ptr.as_ptr() as usize,
            });
        };
        if ptr.as_ptr() as usize % align != 0 {
            return Err(FreeError::Misaligned {
                ptr: ptr.as_ptr() as usize,
            });
        }
        // SAFETY: the caller's contract: a large block with this layout.
        unsafe { self.pages.free_pages(ptr, size) };
        self.large_bytes.fetch_sub(size, Ordering::Relaxed);
        Ok(())
    }

    /// Destroys every cache; the first error is returned (the others are
    /// still attempted). With deferred frees pending (see
    /// [`free_deferred`](Self::free_deferred)) nothing is destroyed and
    /// [`DestroyError::DeferredPending`] is returned: wait for them with
    /// [`destroy_deferred`](Self::destroy_deferred). Dropping a `Kmalloc`
    /// with deferred frees pending leaks them (and their slabs) rather than
    /// freeing under a reader.
    pub fn destroy(&mut self) -> Result<(), DestroyError> {
        let pending = self.deferred_pending();
        if pending != 0 {
            return Err(DestroyError::DeferredPending { objects: pending });
        }
        // Before any cache goes: the leaf must not reach a destroyed one.
        self.leaf.turn_off();
        let mut first = Ok(());
        for c in &mut self.caches {
            let r = c.destroy();
            if first.is_ok() {
                first = r;
            }
        }
        if self.caches.iter().all(|c| c.is_destroyed()) {
            // SAFETY: every cache is destroyed and has released its lines.
            unsafe { self.sheaf_area.release() };
        }
        first
    }
}
