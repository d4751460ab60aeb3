//! Resizing an allocated object where it is (krealloc within its size
//! class): zeroing what it grows into, and, under `debug`, recording the
//! size asked for so the bytes past it are red zone.

use super::KmemCache;
use arch_api::Platform;
use core::ptr::NonNull;

impl<K: Platform> KmemCache<K> {
    /// The size last asked for of allocated object `p`: the recorded one
    /// under `debug`, else `fallback` (the caller's idea of it).
    #[cfg_attr(not(feature = "debug"), allow(clippy::unused_self))]
    pub(crate) fn requested_size(&self, p: NonNull<u8>, fallback: usize) -> usize {
        #[cfg(feature = "debug")]
        {
            let _ = fallback;
            crate::hardening::orig_size(self.slabs.geo(), p.as_ptr() as usize)
        }
        #[cfg(not(feature = "debug"))]
        {
            let _ = p;
            fallback.min(self.object_size())
        }
    }

    /// Records that `n` bytes (at most the object size) of allocated object
    /// `p` are asked for; under `debug` the rest becomes red zone.
    #[inline(always)]
    pub(crate) fn set_requested_size(&self, p: NonNull<u8>, n: usize) {
        #[cfg(feature = "debug")]
        crate::hardening::set_orig_size(self.slabs.geo(), p.as_ptr() as usize, n);
        #[cfg(not(feature = "debug"))]
        let _ = (p, n);
    }

    /// krealloc within the object: `old` bytes were asked for (the recorded
    /// size under `debug`), `new` (at most the object size) are now; with
    /// `zero` the bytes it grows into are zeroed (`__GFP_ZERO`).
    ///
    /// # Safety
    /// `p` is an allocated object of this cache owned by the caller.
    pub(crate) unsafe fn resize_in_place(
        &self,
        p: NonNull<u8>,
        old: usize,
        new: usize,
        zero: bool,
    ) {
        let new = new.min(self.object_size());
        let old = self.requested_size(p, old);
        if zero && new > old {
            // SAFETY: `old..new` lies inside the object, which is ours.
            unsafe { p.as_ptr().add(old).write_bytes(0, new - old) };
        }
        self.set_requested_size(p, new);
    }
}
