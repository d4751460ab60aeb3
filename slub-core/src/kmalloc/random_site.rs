//! One call site's copy of the random kmalloc caches, the keyed hash paid
//! once: [`RandomSite`].

use super::{Kmalloc, NR_KMALLOC_CLASSES, kmalloc_index};
use crate::cache::KmemCache;
use crate::error::{AllocError, FreeError};
use arch_api::Platform;
use core::alloc::Layout;
use core::ptr::NonNull;

/// The copy of the kmalloc caches that one caller key selects, from
/// [`RandomKmalloc::site`](super::RandomKmalloc::site) or
/// [`site_here`](super::RandomKmalloc::site_here).
///
/// The per-call [`alloc_caller`](super::RandomKmalloc::alloc_caller) /
/// [`free_caller`](super::RandomKmalloc::free_caller) hash the key on
/// every call, both ways (the layout-based free reads no slab header, so it
/// cannot find the copy otherwise). A call site that allocates often takes
/// its site once (at init, or before a loop) and then pays what a plain
/// [`Kmalloc`] pair pays: the copy is the same one the per-call functions
/// choose for that key, so the two may be mixed. Large sizes go to the
/// general path, as with the per-call functions.
///
/// ```
/// # use arch_api::{HostedCpus, PhysArena};
/// # use core::alloc::Layout;
/// # use slub_core::{ArenaPages, CacheFlags, RandomKmalloc};
/// # use slub_core::testing::HostedPlatform;
/// # let arena = PhysArena::new(8 << 20, 4096).unwrap();
/// # let pages = ArenaPages::new(&arena);
/// # let cpus = HostedCpus::new(2);
/// let km: RandomKmalloc<HostedPlatform<&ArenaPages, &HostedCpus>> =
///     RandomKmalloc::new(&pages, &cpus, CacheFlags::empty(), 0x1234_5678).unwrap();
/// let site = km.site_here(); // this line's copy, chosen once
/// let l = Layout::from_size_align(100, 8).unwrap();
/// for _ in 0..4 {
///     let p = site.alloc(l).unwrap();
///     // SAFETY: allocated just above through `site` with `l`.
///     unsafe { site.free(p, l) }.unwrap();
/// }
/// ```
pub struct RandomSite<'a, K: Platform> {
    copy: &'a [KmemCache<K>; NR_KMALLOC_CLASSES],
    general: &'a Kmalloc<K>,
}

impl<K: Platform> Clone for RandomSite<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Platform> Copy for RandomSite<'_, K> {}

impl<K: Platform> core::fmt::Debug for RandomSite<'_, K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RandomSite")
            .field("copy", &self.copy[0].name())
            .finish_non_exhaustive()
    }
}

impl<'a, K: Platform> RandomSite<'a, K> {
    pub(super) fn new(
        copy: &'a [KmemCache<K>; NR_KMALLOC_CLASSES],
        general: &'a Kmalloc<K>,
    ) -> Self {
        Self { copy, general }
    }

    /// The copy's caches, smallest first.
    pub fn caches(&self) -> &'a [KmemCache<K>; NR_KMALLOC_CLASSES] {
        self.copy
    }

    /// `kmalloc` from this site's copy (large sizes: the general path).
    #[inline(always)]
    pub fn alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        match kmalloc_index(layout.size(), layout.align()) {
            #[cfg(feature = "debug")]
            Some(i) => {
                let c = &self.copy[i];
                c.alloc()
                    .inspect(|&p| c.set_requested_size(p, layout.size()))
            }
            #[cfg(not(feature = "debug"))]
            Some(i) => self.copy[i].alloc(),
            None => self.general.alloc(layout),
        }
    }

    /// `kfree` of an object of this site's copy.
    ///
    /// # Safety
    /// `ptr` was allocated with `layout` through this site, or through
    /// [`alloc_caller`](super::RandomKmalloc::alloc_caller) with this
    /// site's key, and is not used after a successful free (as for
    /// [`Kmalloc::free`]). Under `debug` an object of another copy is
    /// refused with [`FreeError::ForeignPointer`].
    #[inline(always)]
    pub unsafe fn free(&self, ptr: NonNull<u8>, layout: Layout) -> Result<(), FreeError> {
        match kmalloc_index(layout.size(), layout.align()) {
            // SAFETY: the caller's contract.
            Some(i) => unsafe { self.copy[i].free(ptr) },
            // SAFETY: the caller's contract: a large block of the general path.
            None => unsafe { self.general.free(ptr, layout) },
        }
    }
}
