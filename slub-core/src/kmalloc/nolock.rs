//! `kmalloc_nolock` / `kfree_nolock` on the size classes: the class's
//! [`KmemCache::alloc_nolock`](crate::KmemCache::alloc_nolock) and
//! [`free_nolock`](crate::KmemCache::free_nolock).
//!
//! Linux retries a failed `kmalloc_nolock` in the next bigger bucket,
//! because its `kfree` finds the cache from `struct page`; here
//! [`Kmalloc::free`] takes the layout, which must name the class the object
//! came from, so the answer is [`AllocError::WouldBlock`] instead. Large
//! sizes (page-source blocks) are never served without waiting.

use super::{Kmalloc, kmalloc_index};
use crate::error::{AllocError, FreeError};
use arch_api::Platform;
use core::alloc::Layout;
use core::ptr::NonNull;

impl<K: Platform> Kmalloc<K> {
    /// `kmalloc_nolock`: never waits for a lock (see
    /// [`KmemCache::alloc_nolock`](crate::KmemCache::alloc_nolock)).
    pub fn alloc_nolock(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let i = kmalloc_index(layout.size(), layout.align()).ok_or(AllocError::WouldBlock)?;
        let p = self.caches[i].alloc_nolock()?;
        self.caches[i].set_requested_size(p, layout.size());
        Ok(p)
    }

    /// `kfree_nolock`.
    ///
    /// # Safety
    /// `ptr` came from [`alloc_nolock`](Self::alloc_nolock) or
    /// [`alloc`](Self::alloc) with `layout` (a class size), as for
    /// [`free`](Self::free).
    pub unsafe fn free_nolock(&self, ptr: NonNull<u8>, layout: Layout) -> Result<(), FreeError> {
        match kmalloc_index(layout.size(), layout.align()) {
            // SAFETY: the caller's contract.
            Some(i) => unsafe { self.caches[i].free_nolock(ptr) },
            None => Err(FreeError::ForeignPointer {
                ptr: ptr.as_ptr() as usize,
            }),
        }
    }
}
