//! The tid front's part of `kmalloc_nolock` / `kfree_nolock`: the CPU
//! freelist with its DW-CAS and no guard, which is safe from any context
//! (an interrupted operation on the same cell loses its CAS and retries).
//! Nothing here pins, refills or takes a lock.

use super::{TidFront, Window};
use crate::cpu_local::CpuLocal;
use crate::error::{AllocError, FreeError};
use crate::freelist::{NO_SLAB, is_token};
use crate::page_source::PageSource;
use crate::slabs::Slabs;
use arch_api::DwCas;
use arch_api::sync::RawMutex;
use core::sync::atomic::Ordering;

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> TidFront<P, C, D, R> {
    /// The CPU id without a guard: the backend's free pinned id where it
    /// has one (no registration on this path), else `current_cpu`.
    #[inline(always)]
    fn nolock_cpu(&self, s: &Slabs<P, C, D, R>) -> Option<usize> {
        if C::HAS_PINNED_CPU {
            s.cpus().pinned_cpu().or_else(|| s.cpus().current_cpu())
        } else {
            s.cpus().current_cpu()
        }
    }

    /// One try of [`alloc_nolock`](Self::alloc_nolock) with only the
    /// common case (a next pointer to another object of the slab); `None`
    /// sends the caller to the full path.
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) fn alloc_nolock_fast(&self, s: &Slabs<P, C, D, R>) -> Option<usize> {
        self.alloc_fast_on(s, self.nolock_cpu(s)?)
    }

    /// Pops the head of the current CPU's freelist; `Ok(None)` when it is
    /// exhausted (or the caller has no CPU id).
    #[inline]
    pub(crate) fn alloc_nolock(&self, s: &Slabs<P, C, D, R>) -> Result<Option<usize>, AllocError> {
        let Some(mut cpu) = self.nolock_cpu(s) else {
            return Ok(None);
        };
        loop {
            let c = self.cpu_slab(cpu);
            let tid = c.cell.load_hi(Ordering::Acquire);
            let fl = c.cell.load_lo(Ordering::Acquire);
            if is_token(fl) {
                return Ok(None);
            }
            // SAFETY: `fl` is not a token, so an object of a live slab.
            let next = unsafe { s.codec().get(fl as usize) };
            // The common case as the fast path checks it; the end token and
            // anything bad get the full validation.
            let next = if s
                .geo()
                .is_object(s.geo().base_of(fl as usize), next as usize)
            {
                Some(next)
            } else {
                self.next_of(s, c, fl, tid)?
            };
            let Some(next) = next else {
                continue;
            };
            if self.tid_commit(s, &mut cpu, Window::Alloc, fl, tid, next) {
                return Ok(Some(fl as usize));
            }
        }
    }

    /// Pushes `p` (checked by the caller) onto the current CPU's freelist if
    /// it belongs to the CPU slab; `None` if it does not (or no CPU id).
    #[inline]
    pub(crate) fn free_nolock(
        &self,
        s: &Slabs<P, C, D, R>,
        p: usize,
    ) -> Option<Result<(), FreeError>> {
        let mut cpu = self.nolock_cpu(s)?;
        loop {
            let c = self.cpu_slab(cpu);
            let tid = c.cell.load_hi(Ordering::Acquire);
            let fl = c.cell.load_lo(Ordering::Acquire);
            if fl == NO_SLAB || !s.geo().in_range(s.geo().base_of(fl as usize), p) {
                return None;
            }
            if fl == p as u64 {
                return Some(Err(FreeError::DoubleFree { ptr: p }));
            }
            // SAFETY: `p` is an object of the CPU slab being freed by us.
            unsafe { s.codec().set(p, fl) };
            if self.tid_commit(s, &mut cpu, Window::Free, fl, tid, p as u64) {
                return Some(Ok(()));
            }
        }
    }
}
