//! Random kmalloc caches (Linux's `CONFIG_RANDOM_KMALLOC_CACHES`): sixteen
//! copies of every size class, the copy chosen per call by a keyed hash of
//! the caller's address, so that objects allocated at different call sites
//! rarely share a slab (heap spraying from one site cannot place its objects
//! next to another site's). The design and its cost: [`RandomKmalloc`].

use super::random_site::RandomSite;
use super::{KMALLOC_MIN_SIZE, Kmalloc, NR_KMALLOC_CLASSES};
use crate::cache::{CacheFlags, KmemCache};
use crate::error::{AllocError, CacheError, DestroyError, FreeError};
use crate::mem::PlatformMem;
use crate::page_source::SlabPages;
use arch_api::Platform;
use core::alloc::Layout;
use core::ptr::NonNull;

/// Copies of each size class (Linux's `RANDOM_KMALLOC_CACHES_NR + 1`).
pub const NR_RANDOM_COPIES: usize = 16;

macro_rules! copy_names {
    ($($c:literal)*) => {
        [$([
            concat!("kmalloc-rnd-", $c, "-8"),
            concat!("kmalloc-rnd-", $c, "-16"),
            concat!("kmalloc-rnd-", $c, "-32"),
            concat!("kmalloc-rnd-", $c, "-64"),
            concat!("kmalloc-rnd-", $c, "-128"),
            concat!("kmalloc-rnd-", $c, "-256"),
            concat!("kmalloc-rnd-", $c, "-512"),
            concat!("kmalloc-rnd-", $c, "-1k"),
            concat!("kmalloc-rnd-", $c, "-2k"),
            concat!("kmalloc-rnd-", $c, "-4k"),
            concat!("kmalloc-rnd-", $c, "-8k"),
            concat!("kmalloc-rnd-", $c, "-16k"),
        ]),*]
    };
}

const NAMES: [[&str; NR_KMALLOC_CLASSES]; NR_RANDOM_COPIES] =
    copy_names!("00" "01" "02" "03" "04" "05" "06" "07" "08" "09" "10" "11" "12" "13" "14" "15");

/// The kmalloc caches plus [`NR_RANDOM_COPIES`] copies of every size class,
/// chosen by caller.
///
/// Linux picks the copy with `hash_64(caller ^ seed)`; here the key is a
/// per-boot odd multiplier and the copy is the top four bits of
/// `caller * key` (multiply-shift, a universal family: without the key one
/// cannot tell which call sites share a copy). Linux's `kfree` finds the
/// cache from `struct page`; the layout-based [`Kmalloc::free`] reads no
/// slab header, so an object of a copy is freed with
/// [`free_caller`](Self::free_caller) and the *same* caller key that
/// allocated it (under `debug`, another key is refused).
///
/// A type of its own (Linux: a build-time option), so the plain [`Kmalloc`]
/// pays nothing. The cost of the copies: sixteen times the caches (each
/// with its per-CPU arrays and partial slabs), and per call about six
/// instructions (load the key, multiply, shift, load the copy; +12 to +18
/// per alloc/free pair, BENCHMARKS.md).
///
/// A call site that allocates often takes its copy once with
/// [`site`](Self::site) / [`site_here`](Self::site_here): a [`RandomSite`]
/// allocates and frees at the cost of a plain [`Kmalloc`] pair.
///
/// Plain [`alloc`](Self::alloc) / [`free`](Self::free) (no caller) use the
/// general caches, as [`Kmalloc`] does.
///
/// ```
/// # use arch_api::{HostedCpus, PhysArena};
/// # use core::alloc::Layout;
/// # use slub_core::{ArenaPages, CacheFlags, RandomKmalloc};
/// # use slub_core::testing::HostedPlatform;
/// # let arena = PhysArena::new(8 << 20, 4096).unwrap();
/// let pages = ArenaPages::new(&arena);
/// let cpus = HostedCpus::new(2);
/// // The seed comes from the OS's boot-time entropy.
/// let km: RandomKmalloc<HostedPlatform<&ArenaPages, &HostedCpus>> =
///     RandomKmalloc::new(&pages, &cpus, CacheFlags::empty(), 0x1234_5678).unwrap();
/// let l = Layout::from_size_align(100, 8).unwrap();
/// let (p, site) = km.alloc_here(l).unwrap(); // this line's address is the key
/// // SAFETY: allocated above with `l` and `site`.
/// unsafe { km.free_caller(p, l, site) }.unwrap();
/// ```
pub struct RandomKmalloc<K: Platform> {
    general: Kmalloc<K>,
    /// Odd per-boot multiplier.
    key: usize,
    /// Copy `c`'s twelve caches, smallest first, inside `block`.
    copies: [NonNull<KmemCache<K>>; NR_RANDOM_COPIES],
    block: NonNull<KmemCache<K>>,
    block_bytes: usize,
}

// SAFETY: the copies are `KmemCache`s owned by this value (in `block`), as
// shareable as the general caches; the pointers are only read.
unsafe impl<K: Platform> Send for RandomKmalloc<K> where Kmalloc<K>: Send {}
// SAFETY: as above.
unsafe impl<K: Platform> Sync for RandomKmalloc<K> where Kmalloc<K>: Sync {}

impl<K: Platform> core::fmt::Debug for RandomKmalloc<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RandomKmalloc")
            .field("general", &self.general)
            .finish_non_exhaustive()
    }
}

const ALL: usize = NR_RANDOM_COPIES * NR_KMALLOC_CLASSES;

#[path = "random_deferred.rs"]
mod deferred;

impl<K: Platform> RandomKmalloc<K>
where
    K::Mem: Clone,
    K::Cpu: Clone,
{
    /// The general caches and the copies (`flags` for each), the copies'
    /// `KmemCache`s themselves in pages from `mem`; `seed` is the OS's
    /// per-boot secret (Linux: `random_kmalloc_seed`).
    pub fn new(
        mem: K::Mem,
        cpus: K::Cpu,
        flags: CacheFlags,
        seed: u64,
    ) -> Result<Self, CacheError> {
        let general = Kmalloc::new(mem.clone(), cpus.clone(), flags)?;
        let pages = PlatformMem::<K>(mem.clone());
        let page = pages.page_size();
        let block_bytes = (ALL * core::mem::size_of::<KmemCache<K>>())
            .checked_next_multiple_of(page)
            .ok_or(CacheError::OutOfMemory)?;
        let align = page.max(core::mem::align_of::<KmemCache<K>>());
        let block = pages
            .alloc_pages(block_bytes, align)
            .ok_or(CacheError::OutOfMemory)?
            .cast::<KmemCache<K>>();
        for n in 0..ALL {
            let (c, i) = (n / NR_KMALLOC_CLASSES, n % NR_KMALLOC_CLASSES);
            let size = KMALLOC_MIN_SIZE << i;
            match KmemCache::new(NAMES[c][i], size, size, flags, mem.clone(), cpus.clone()) {
                // SAFETY: slot `n` of `block` (sized and aligned for `ALL`
                // caches) is unused.
                Ok(k) => unsafe { block.as_ptr().add(n).write(k) },
                Err(e) => {
                    // SAFETY: slots `0..n` hold caches written above, used by
                    // no one; the block came from `pages` with this size.
                    unsafe {
                        core::ptr::slice_from_raw_parts_mut(block.as_ptr(), n).drop_in_place();
                        pages.free_pages(block.cast(), block_bytes);
                    }
                    return Err(e);
                }
            }
        }
        // SAFETY: `c * NR_KMALLOC_CLASSES < ALL`: inside `block`.
        let copies = core::array::from_fn(|c| unsafe { block.add(c * NR_KMALLOC_CLASSES) });
        Ok(Self {
            general,
            key: (crate::slabs::mix(seed) | 1) as usize,
            copies,
            block,
            block_bytes,
        })
    }
}

impl<K: Platform> RandomKmalloc<K> {
    /// The general caches (plain [`alloc`](Self::alloc) and large sizes).
    pub fn general(&self) -> &Kmalloc<K> {
        &self.general
    }

    /// Every copy's caches: copy 0's twelve, smallest first, then copy 1's, …
    pub fn copy_caches(&self) -> &[KmemCache<K>] {
        // SAFETY: `block` holds `ALL` initialised caches owned by `self`.
        unsafe { core::slice::from_raw_parts(self.block.as_ptr(), ALL) }
    }

    /// Which copy serves allocations keyed by `caller`.
    #[inline(always)]
    pub fn copy_index(&self, caller: usize) -> usize {
        // Multiply-shift: the top bits of the product (a shift by 60 on
        // 64-bit targets), no bounds check needed.
        caller.wrapping_mul(self.key) >> (usize::BITS - NR_RANDOM_COPIES.trailing_zeros())
    }

    /// Class `class`'s cache in the copy `caller` selects.
    #[inline(always)]
    fn cache(&self, caller: usize, class: usize) -> &KmemCache<K> {
        &self.site(caller).caches()[class]
    }

    /// The copy `caller` selects, as a handle that allocates and frees
    /// without hashing again ([`RandomSite`]).
    #[inline(always)]
    pub fn site(&self, caller: usize) -> RandomSite<'_, K> {
        let base = self.copies[self.copy_index(caller)];
        // SAFETY: `base` is the first of the copy's `NR_KMALLOC_CLASSES`
        // caches, consecutive in `block`, initialised and owned by `self`.
        let copy = unsafe { &*base.as_ptr().cast::<[KmemCache<K>; NR_KMALLOC_CLASSES]>() };
        RandomSite::new(copy, &self.general)
    }

    /// [`site`](Self::site) keyed by the calling line's
    /// [`Location`](core::panic::Location), the key
    /// [`alloc_here`](Self::alloc_here) uses on that line.
    #[track_caller]
    #[inline(always)]
    pub fn site_here(&self) -> RandomSite<'_, K> {
        self.site(core::panic::Location::caller() as *const _ as usize)
    }

    /// `kmalloc` from the copy chosen by `caller` (Linux: `_RET_IP_`; any
    /// key stable per call site, e.g. a return address or a `Location`).
    /// Large sizes come from the general path.
    #[inline(always)]
    pub fn alloc_caller(&self, layout: Layout, caller: usize) -> Result<NonNull<u8>, AllocError> {
        self.site(caller).alloc(layout)
    }

    /// [`alloc_caller`](Self::alloc_caller) keyed by the calling line's
    /// [`Location`](core::panic::Location) (through `#[track_caller]`
    /// functions, their caller's); the key comes back for the free.
    #[track_caller]
    #[inline(always)]
    pub fn alloc_here(&self, layout: Layout) -> Result<(NonNull<u8>, usize), AllocError> {
        let caller = core::panic::Location::caller() as *const _ as usize;
        self.alloc_caller(layout, caller).map(|p| (p, caller))
    }

    /// `kfree` of an object of [`alloc_caller`](Self::alloc_caller).
    ///
    /// # Safety
    /// `ptr` was returned by `alloc_caller(layout, caller)` with this
    /// `layout` and this `caller`, as for [`Kmalloc::free`]. Under `debug`
    /// a different `caller` (another copy) is refused with
    /// [`FreeError::ForeignPointer`]; without it, as a free to the wrong
    /// [`KmemCache`], it may go unnoticed.
    #[inline(always)]
    pub unsafe fn free_caller(
        &self,
        ptr: NonNull<u8>,
        layout: Layout,
        caller: usize,
    ) -> Result<(), FreeError> {
        // SAFETY: the caller's contract: allocated through this key's copy.
        unsafe { self.site(caller).free(ptr, layout) }
    }

    /// `kmalloc` without a caller: the general caches.
    #[inline(always)]
    pub fn alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.general.alloc(layout)
    }

    /// `kfree` of an object of [`alloc`](Self::alloc).
    ///
    /// # Safety
    /// As [`Kmalloc::free`].
    #[inline(always)]
    pub unsafe fn free(&self, ptr: NonNull<u8>, layout: Layout) -> Result<(), FreeError> {
        // SAFETY: the caller's contract.
        unsafe { self.general.free(ptr, layout) }
    }

    /// Destroys the general caches and every copy; the first error is
    /// returned (the others are still attempted). While deferred frees are
    /// pending anywhere it refuses with [`DestroyError::DeferredPending`]
    /// and destroys nothing ([`destroy_deferred`](Self::destroy_deferred)
    /// waits for them).
    pub fn destroy(&mut self) -> Result<(), DestroyError> {
        self.refuse_deferred_pending()?;
        let mut first = self.general.destroy();
        // SAFETY: `block` holds `ALL` initialised caches owned by `self`,
        // borrowed mutably through `self`.
        let all = unsafe { core::slice::from_raw_parts_mut(self.block.as_ptr(), ALL) };
        for c in all {
            let r = c.destroy();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl<K: Platform> Drop for RandomKmalloc<K> {
    /// Drops the copies (each destroys itself if it still can, as a
    /// `KmemCache` does) and returns their block.
    fn drop(&mut self) {
        // SAFETY: `block` holds `ALL` initialised caches owned by `self` and
        // used by no one after this; it came from the page source with
        // `block_bytes`.
        unsafe {
            core::ptr::slice_from_raw_parts_mut(self.block.as_ptr(), ALL).drop_in_place();
            self.general
                .pages
                .free_pages(self.block.cast(), self.block_bytes);
        }
    }
}
