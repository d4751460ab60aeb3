//! The slab layer's routes for `kmalloc_nolock` / `kfree_nolock`: an object
//! straight off a node partial slab's freelist, and a free to a slab's
//! freelist, each taking the node lock only with a try-lock. Neither calls
//! the page source (no new slab, no discard), whose calling contexts may be
//! narrower than "anywhere".

use super::Slabs;
use crate::cpu_local::CpuLocal;
use crate::error::{AllocError, FreeError};
use crate::freelist::{end_token, valid_next};
use crate::page_source::PageSource;
use crate::slab::{Counters, Slab};
use arch_api::sync::RawMutex;
use arch_api::{DoubleWord, DwCas};
use core::sync::atomic::Ordering;

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> Slabs<P, C, D, R> {
    /// Pops one object off the first node partial slab, leaving the slab
    /// unfrozen (and taking it off the list if that was its last free
    /// object). `Ok(None)`: the node lock is held elsewhere, or no partial
    /// slab.
    pub(crate) fn alloc_partial_nolock(&self) -> Result<Option<usize>, AllocError> {
        let Some(mut n) = self.node.try_lock() else {
            return Ok(None);
        };
        let x = n.first();
        if x.is_null() {
            return Ok(None);
        }
        // SAFETY: under the node lock a listed slab is live.
        let st = unsafe { &(*x).state };
        let end = end_token(x as usize);
        loop {
            let hi = st.load_hi(Ordering::Acquire);
            let lo = st.load_lo(Ordering::Acquire);
            let c = Counters(hi);
            if lo == end || c.frozen() {
                // Not for a listed slab (see `partial.rs`); refuse, do not fix.
                return Ok(None);
            }
            // Only holders of the node lock pop from an unfrozen slab, so
            // `lo` stays free until our CAS; frees may push before it (the
            // CAS then fails and we retry).
            // SAFETY: `lo` is an object of the live slab `x`.
            let next = unsafe { self.codec.get(lo as usize) };
            if !valid_next(&self.geo, x as usize, next) {
                if st.load_lo(Ordering::Acquire) != lo {
                    continue;
                }
                return Err(AllocError::FreelistCorrupted {
                    object: lo as usize,
                    decoded: next as usize,
                    offset: self.codec.fp_off as u32,
                });
            }
            let new = DoubleWord::new(next, c.next(c.inuse() + 1, false).0);
            if D::compare_exchange(st, DoubleWord::new(lo, hi), new).is_ok() {
                if next == end {
                    // Now full: an unfrozen full slab is on no list.
                    // SAFETY: under the node lock; `x` is on the list.
                    unsafe { n.remove(x) };
                }
                return Ok(Some(lo as usize));
            }
        }
    }

    /// `__slab_free` of one object with a try-lock: `Ok(false)` when the
    /// node lock was needed (the slab turns empty or stops being full) and
    /// is held elsewhere; nothing was freed then. An empty slab stays on
    /// the list (a later `shrink` returns it).
    pub(crate) fn slab_free_nolock(&self, p: usize) -> Result<bool, FreeError> {
        #[cfg(not(feature = "debug"))]
        // SAFETY: the `free_nolock` contract: `p` is in mapped memory.
        unsafe {
            self.check_owner(p)?
        };
        let x = self.geo.base_of(p) as *mut Slab;
        // SAFETY: `x` is a live slab of this cache (checked above, or by the
        // caller under `debug`).
        let st = unsafe { &(*x).state };
        let end = end_token(x as usize);
        let mut guard = None;
        let (was_frozen, prior) = loop {
            let hi = st.load_hi(Ordering::Acquire);
            let lo = st.load_lo(Ordering::Acquire);
            if lo == p as u64 {
                return Err(FreeError::DoubleFree { ptr: p });
            }
            let c = Counters(hi);
            let Some(inuse) = c.inuse().checked_sub(1) else {
                return Err(FreeError::DoubleFree { ptr: p });
            };
            if !c.frozen() && (inuse == 0 || lo == end) && guard.is_none() {
                match self.node.try_lock() {
                    Some(g) => {
                        guard = Some(g);
                        continue;
                    }
                    None => return Ok(false),
                }
            }
            // SAFETY: `p` is an object being freed by us.
            unsafe { self.codec.set(p, lo) };
            let new = DoubleWord::new(p as u64, c.next(inuse, c.frozen()).0);
            if D::compare_exchange(st, DoubleWord::new(lo, hi), new).is_ok() {
                break (c.frozen(), lo);
            }
        };
        if let (false, Some(mut n)) = (was_frozen, guard) {
            // SAFETY: under the node lock.
            if prior == end && !unsafe { n.contains(x) } {
                // Was full and unfrozen (on no list): now partial.
                // SAFETY: under the node lock; `x` is on no list.
                unsafe { n.add(x) };
            }
        }
        Ok(true)
    }
}

#[cfg(feature = "testing")]
impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> Slabs<P, C, D, R> {
    /// Runs `f` under the node lock (the testing hook of
    /// `KmemCache::with_node_lock_held`).
    pub(crate) fn with_node_lock_held<T>(&self, f: impl FnOnce() -> T) -> T {
        let _g = self.node.lock();
        f()
    }
}
