//! `krealloc`: resize a kmalloc object, in place while the new size is
//! served by the same size class (or the same pages, for a large block),
//! else by moving it.
//!
//! Linux keeps the object on every shrink, because its `kfree` finds the
//! cache from `struct page`; this crate's [`Kmalloc::free`] takes the
//! layout, so an object must stay in the class its layout names: a shrink
//! into a smaller class moves too, and the object is then freed with the
//! new size.
//!
//! With `zero` (Linux's `__GFP_ZERO`) the bytes the object grows into read
//! as zero; under `debug` the bytes past the new size are red zone
//! (`SLUB_RED_ACTIVE`), as Linux's `test_krealloc_redzone_zeroing` checks.

use super::{Kmalloc, kmalloc_index};
use crate::error::AllocError;
use arch_api::Platform;
use core::alloc::Layout;
use core::ptr::NonNull;

impl<K: Platform> Kmalloc<K> {
    /// `krealloc(ptr, new_size)`: `ptr` was allocated with `old`; the result
    /// (`ptr` itself when it stays) is freed with
    /// `Layout::from_size_align(new_size, old.align())`. On an error `ptr` is
    /// left as it was.
    ///
    /// ```
    /// # use arch_api::PhysArena;
    /// # use core::alloc::Layout;
    /// # use slub_core::{ArenaPages, CacheFlags, Kmalloc, ThreadCpus};
    /// # use slub_core::testing::HostedPlatform;
    /// # let arena = PhysArena::new(8 << 20, 4096).unwrap();
    /// let pages = ArenaPages::new(&arena);
    /// let km: Kmalloc<HostedPlatform<&ArenaPages, ThreadCpus>> =
    ///     Kmalloc::new(&pages, ThreadCpus, CacheFlags::empty()).unwrap();
    /// let old = Layout::from_size_align(40, 8).unwrap();
    /// let p = km.alloc(old).unwrap();
    /// // SAFETY: allocated above with `old`.
    /// let q = unsafe { km.krealloc(p, old, 56, true) }.unwrap();
    /// assert_eq!(p, q); // 40 and 56 are both kmalloc-64
    /// // SAFETY: bytes 40..56 are ours now, zeroed.
    /// assert_eq!(unsafe { *q.as_ptr().add(50) }, 0);
    /// // SAFETY: allocated with 56 bytes now.
    /// unsafe { km.free(q, Layout::from_size_align(56, 8).unwrap()) }.unwrap();
    /// ```
    ///
    /// # Safety
    /// As [`free`](Self::free) for `ptr` and `old`; `ptr` is not used after
    /// a successful call (unless the result is `ptr`).
    pub unsafe fn krealloc(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new_size: usize,
        zero: bool,
    ) -> Result<NonNull<u8>, AllocError> {
        let new =
            Layout::from_size_align(new_size, old.align()).map_err(|_| AllocError::BadLayout)?;
        let from = kmalloc_index(old.size(), old.align());
        let to = kmalloc_index(new.size(), new.align());
        match (from, to) {
            (Some(i), Some(j)) if i == j => {
                // SAFETY: the caller's contract: an object of class `i`.
                unsafe { self.caches[i].resize_in_place(ptr, old.size(), new_size, zero) };
                return Ok(ptr);
            }
            (None, None) if self.large_layout(old) == self.large_layout(new) => {
                if zero && new_size > old.size() {
                    // SAFETY: the block holds the rounded-up size, which
                    // covers `new_size`.
                    unsafe {
                        ptr.as_ptr()
                            .add(old.size())
                            .write_bytes(0, new_size - old.size())
                    };
                }
                return Ok(ptr);
            }
            _ => {}
        }
        // Move: what the caller asked for of the old object is copied.
        let kept = match from {
            Some(i) => self.caches[i].requested_size(ptr, old.size()),
            None => old.size(),
        };
        let q = self.alloc(new)?;
        let copy = kept.min(new_size);
        // SAFETY: both objects are ours, distinct, and at least `copy` long.
        unsafe { core::ptr::copy_nonoverlapping(ptr.as_ptr(), q.as_ptr(), copy) };
        if zero && new_size > copy {
            // SAFETY: `q` holds `new_size` bytes.
            unsafe { q.as_ptr().add(copy).write_bytes(0, new_size - copy) };
        }
        // SAFETY: the caller's contract.
        if let Err(e) = unsafe { self.free(ptr, old) } {
            // SAFETY: allocated just above, handed out to no one.
            let _ = unsafe { self.free(q, new) };
            return Err(AllocError::Free(e));
        }
        Ok(q)
    }
}
