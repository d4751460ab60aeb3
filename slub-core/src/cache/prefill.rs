//! Prefilled reservations (Linux's `kmem_cache_prefill_sheaf`,
//! `kmem_cache_alloc_from_sheaf`, `kmem_cache_return_sheaf`): a caller that
//! must not fail later (in a lock, in a page-table update) takes `n` objects
//! ahead of time with one bulk allocation and draws on them with no error
//! path; what it did not use goes back with one bulk free.

use super::KmemCache;
use crate::error::{AllocError, FreeError};
use crate::page_source::SlabPages;
use arch_api::Platform;
use core::ptr::NonNull;

/// A reservation of objects of one cache, from
/// [`KmemCache::prefill`]. The first `n` calls of [`alloc`](Self::alloc)
/// cannot fail. The objects it still holds go back to the cache with
/// [`give_back`](Self::give_back) or when it is dropped.
///
/// The slots live in a block of the cache's page source (Linux: an
/// oversize sheaf), so any `n` works without another allocator.
///
/// ```
/// # use arch_api::PhysArena;
/// # use slub_core::{ArenaPages, CacheFlags, KmemCache, ThreadCpus};
/// # use slub_core::testing::HostedPlatform;
/// # let arena = PhysArena::new(4 << 20, 4096).unwrap();
/// let cache: KmemCache<HostedPlatform<ArenaPages, ThreadCpus>> =
///     KmemCache::new("nodes", 256, 8, CacheFlags::SHEAVES, ArenaPages::new(&arena), ThreadCpus)
///         .unwrap();
/// let mut r = cache.prefill(3).unwrap(); // may fail: before taking the lock
/// let a = r.alloc().unwrap(); // cannot fail: under the lock
/// let b = r.alloc().unwrap();
/// r.give_back().unwrap(); // the third object goes back
/// // SAFETY: allocated above, freed once.
/// unsafe { cache.free_bulk(&[a, b]) }.unwrap();
/// ```
pub struct Prefilled<'c, K: Platform> {
    cache: &'c KmemCache<K>,
    slots: NonNull<usize>,
    cap: usize,
    len: usize,
    bytes: usize,
}

impl<K: Platform> core::fmt::Debug for Prefilled<'_, K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Prefilled")
            .field("cache", &self.cache.name())
            .field("len", &self.len)
            .field("capacity", &self.cap)
            .finish()
    }
}

impl<K: Platform> KmemCache<K> {
    /// `kmem_cache_prefill_sheaf`: reserves `n` objects (all or nothing).
    pub fn prefill(&self, n: usize) -> Result<Prefilled<'_, K>, AllocError> {
        if self.is_destroyed() {
            return Err(AllocError::Destroyed);
        }
        let pages = self.slabs.pages();
        let page = pages.page_size();
        let bytes = n
            .max(1)
            .checked_mul(core::mem::size_of::<usize>())
            .and_then(|b| b.checked_next_multiple_of(page))
            .ok_or(AllocError::BadLayout)?;
        let mem = pages
            .alloc_pages(bytes, page)
            .ok_or(AllocError::OutOfMemory)?;
        let mut r = Prefilled {
            cache: self,
            slots: mem.cast::<usize>(),
            cap: bytes / core::mem::size_of::<usize>(),
            len: 0,
            bytes,
        };
        // On failure `r` is dropped, which returns the block.
        r.refill(n)?;
        Ok(r)
    }
}

impl<K: Platform> Prefilled<'_, K> {
    /// `kmem_cache_alloc_from_sheaf`: one reserved object; `None` only once
    /// more objects were drawn than reserved.
    #[inline]
    pub fn alloc(&mut self) -> Option<NonNull<u8>> {
        self.len = self.len.checked_sub(1)?;
        // SAFETY: slot `len` is below `cap` and holds a reserved object
        // (objects are never at address 0).
        Some(unsafe { NonNull::new_unchecked(*self.slots.as_ptr().add(self.len) as *mut u8) })
    }

    /// Objects still reserved.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no object is left.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most objects the reservation can hold (at least the `n` asked for).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// `kmem_cache_refill_sheaf`: tops the reservation up to `n` objects
    /// (all or nothing; `BadLayout` above [`capacity`](Self::capacity)).
    pub fn refill(&mut self, n: usize) -> Result<(), AllocError> {
        if n > self.cap {
            return Err(AllocError::BadLayout);
        }
        if n <= self.len {
            return Ok(());
        }
        // SAFETY: the block holds `cap` slots; slots `len..n` are ours.
        let free = unsafe {
            core::slice::from_raw_parts_mut(self.slots.as_ptr().add(self.len), n - self.len)
        };
        self.cache.alloc_bulk_raw(free)?;
        self.len = n;
        Ok(())
    }

    /// `kmem_cache_return_sheaf`: the objects not drawn go back to the
    /// cache (one bulk free).
    pub fn give_back(mut self) -> Result<(), FreeError> {
        self.return_objects()
    }

    fn return_objects(&mut self) -> Result<(), FreeError> {
        let n = core::mem::take(&mut self.len);
        // SAFETY: the first `n` slots hold reserved objects, allocated from
        // this cache and handed to no one.
        unsafe {
            let objs = core::slice::from_raw_parts_mut(self.slots.as_ptr(), n);
            self.cache.free_bulk_raw(objs)
        }
    }
}

impl<K: Platform> Drop for Prefilled<'_, K> {
    fn drop(&mut self) {
        let _ = self.return_objects();
        // SAFETY: the block came from this page source in `prefill` and no
        // slot is used any more.
        unsafe {
            self.cache
                .slabs
                .pages()
                .free_pages(self.slots.cast(), self.bytes)
        };
    }
}
