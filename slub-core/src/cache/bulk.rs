//! `kmem_cache_alloc_bulk` / `kmem_cache_free_bulk`: many objects per call,
//! one CPU guard per chunk. Allocation is all-or-nothing; frees are grouped
//! by slab (one CAS per slab run, `tid/bulk.rs`) and, on a sheaves cache,
//! copied into the main sheaf first (`sheaves/bulk.rs`).

use super::{KmemCache, MODE_DESTROYED, MODE_SHEAVES};
use crate::error::{AllocError, FreeError};
use arch_api::{CpuLocal, Platform};
use core::ptr::NonNull;
use core::sync::atomic::Ordering;

/// Objects per pinned step (the stack buffer of the bulk calls: 512 bytes).
const CHUNK: usize = 64;

impl<K: Platform> KmemCache<K> {
    /// `kmem_cache_alloc_bulk`: fills all of `out` with fresh objects, or
    /// nothing (every object taken so far goes back) and an error.
    ///
    /// ```
    /// # use arch_api::PhysArena;
    /// # use slub_core::{ArenaPages, CacheFlags, KmemCache, ThreadCpus};
    /// # use slub_core::testing::HostedPlatform;
    /// # let arena = PhysArena::new(4 << 20, 4096).unwrap();
    /// let cache: KmemCache<HostedPlatform<ArenaPages, ThreadCpus>> =
    ///     KmemCache::new("bulk", 64, 8, CacheFlags::empty(), ArenaPages::new(&arena), ThreadCpus)
    ///         .unwrap();
    /// let mut objs = [core::ptr::NonNull::dangling(); 16];
    /// cache.alloc_bulk(&mut objs).unwrap();
    /// // SAFETY: allocated just above, freed once.
    /// unsafe { cache.free_bulk(&objs) }.unwrap();
    /// ```
    pub fn alloc_bulk(&self, out: &mut [NonNull<u8>]) -> Result<(), AllocError> {
        let mut buf = [0usize; CHUNK];
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(CHUNK);
            if let Err(e) = self.alloc_bulk_raw(&mut buf[..want]) {
                // SAFETY: allocated above by this call, not handed out.
                let _ = unsafe { self.free_bulk(&out[..done]) };
                return Err(e);
            }
            for (o, &p) in out[done..done + want].iter_mut().zip(&buf[..want]) {
                // SAFETY: objects are inside slab memory, never at address 0.
                *o = unsafe { NonNull::new_unchecked(p as *mut u8) };
            }
            done += want;
        }
        Ok(())
    }

    /// [`alloc_bulk`](Self::alloc_bulk) into addresses.
    pub(super) fn alloc_bulk_raw(&self, out: &mut [usize]) -> Result<(), AllocError> {
        let mode = self.mode.load(Ordering::Relaxed);
        if mode == MODE_DESTROYED {
            return Err(AllocError::Destroyed);
        }
        let mut n = 0;
        let mut err = None;
        {
            let (_g, cpu) = self.slabs.cpus().pin();
            if mode == MODE_SHEAVES {
                // SAFETY: the guard pins us to `cpu`.
                n = unsafe { self.sheaves.take_main(&self.slabs, cpu, out) };
            }
            while n < out.len() {
                match self.tid.alloc_bulk_pinned(&self.slabs, cpu, &mut out[n..]) {
                    Ok(k) => n += k,
                    Err(e) => {
                        err = Some(e);
                        break;
                    }
                }
            }
        }
        #[cfg(feature = "debug")]
        {
            // An object whose poison was overwritten is reported and not
            // handed out (as `alloc` does); the others are kept.
            let mut keep = 0;
            for i in 0..n {
                match crate::hardening::on_alloc(self.slabs.geo(), out[i]) {
                    Ok(()) => {
                        out[keep] = out[i];
                        keep += 1;
                    }
                    Err(e) => err = err.or(Some(e)),
                }
            }
            n = keep;
        }
        match err {
            None => Ok(()),
            Some(e) => {
                // SAFETY: taken above, handed out to no one.
                let _ = unsafe { self.free_bulk_raw(&mut out[..n]) };
                Err(e)
            }
        }
    }

    /// `kmem_cache_free_bulk`: frees every object of `objs`, grouped by slab.
    /// Each object gets the checks of [`free`](Self::free) (boundary; under
    /// `debug` owner, red zones, double free); an object that fails them is
    /// left alone and the first such error is returned, the others are
    /// freed. A pointer repeated in `objs` is a double free that only
    /// `debug` is sure to catch.
    ///
    /// # Safety
    /// As [`free`](Self::free), for every object.
    pub unsafe fn free_bulk(&self, objs: &[NonNull<u8>]) -> Result<(), FreeError> {
        if self.is_destroyed() {
            return Err(FreeError::Destroyed);
        }
        let mut buf = [0usize; CHUNK];
        let mut first = Ok(());
        for chunk in objs.chunks(CHUNK) {
            // Checked and copied in one pass.
            let mut n = 0;
            for o in chunk {
                let p = o.as_ptr() as usize;
                // SAFETY: the caller's contract.
                match unsafe { self.check_free_fast(p) } {
                    Ok(()) => {
                        buf[n] = p;
                        n += 1;
                    }
                    Err(e) => first = first.and(Err(e)),
                }
            }
            if let Err(e) = self.free_checked(&mut buf[..n]) {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// [`free_bulk`](Self::free_bulk) of addresses; `objs` is scratch.
    ///
    /// # Safety
    /// As [`free_bulk`](Self::free_bulk).
    pub(super) unsafe fn free_bulk_raw(&self, objs: &mut [usize]) -> Result<(), FreeError> {
        if self.is_destroyed() {
            return Err(FreeError::Destroyed);
        }
        let mut first = Ok(());
        let mut n = 0;
        for i in 0..objs.len() {
            let p = objs[i];
            // SAFETY: the caller's contract.
            match unsafe { self.check_free_fast(p) } {
                Ok(()) => {
                    objs[n] = p;
                    n += 1;
                }
                Err(e) => first = first.and(Err(e)),
            }
        }
        if let Err(e) = self.free_checked(&mut objs[..n]) {
            first = first.and(Err(e));
        }
        first
    }

    /// Frees objects that passed [`check_free`](Self::check_free), under
    /// one guard: into the sheaves first on a sheaves cache, the rest
    /// grouped by slab.
    fn free_checked(&self, objs: &mut [usize]) -> Result<(), FreeError> {
        let mode = self.mode.load(Ordering::Relaxed);
        if mode == MODE_DESTROYED {
            return Err(FreeError::Destroyed);
        }
        if objs.is_empty() {
            return Ok(());
        }
        let (_g, cpu) = self.slabs.cpus().pin();
        let mut k = 0;
        if mode == MODE_SHEAVES {
            // SAFETY: the guard pins us to `cpu`; the objects passed the checks.
            k = unsafe { self.sheaves.put_main(&self.slabs, cpu, objs) };
        }
        if k < objs.len() {
            return self.tid.free_bulk_pinned(&self.slabs, cpu, &mut objs[k..]);
        }
        Ok(())
    }

    /// [`check_free`](Self::check_free) with the common case (an object
    /// boundary, no `debug`) decided by one mask, multiply and rotate.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(always)]
    pub(super) unsafe fn check_free_fast(&self, p: usize) -> Result<(), FreeError> {
        #[cfg(not(feature = "debug"))]
        if self.slabs.geo().is_object_in_own_slab(p) {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe { self.check_free(p) }
    }

    /// The per-object checks of a bulk free (those of `free_slow`).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    pub(super) unsafe fn check_free(&self, p: usize) -> Result<(), FreeError> {
        if p == 0 {
            return Err(FreeError::Null);
        }
        #[cfg(feature = "debug")]
        // SAFETY: the caller's contract; the direct map is consulted first.
        unsafe {
            self.slabs.check_owner(p)?
        };
        let geo = self.slabs.geo();
        if !geo.is_object(geo.base_of(p), p) {
            return Err(FreeError::Misaligned { ptr: p });
        }
        #[cfg(feature = "debug")]
        crate::hardening::on_free(geo, p)?;
        Ok(())
    }
}
