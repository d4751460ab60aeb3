//! Bulk frees for the tid front (`kmem_cache_free_bulk`'s
//! `build_detached_freelist`): the objects of one slab are linked into a
//! chain first, then the chain is freed with one CAS, onto the CPU freelist
//! when it is the CPU slab's, else onto its slab's own freelist.

use super::{CpuSlab, TidFront};
use crate::cpu_local::CpuLocal;
use crate::error::FreeError;
use crate::freelist::NO_SLAB;
use crate::page_source::PageSource;
use crate::slab::Slab;
use crate::slabs::Slabs;
use crate::stats::StatItem;
use arch_api::sync::RawMutex;
use arch_api::{DoubleWord, DwCas};
use core::sync::atomic::Ordering;

/// Objects of other slabs a scan steps over before it stops looking for more
/// of the slab it is building a chain for (Linux's lookahead, 3).
const LOOKAHEAD: usize = 3;

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> TidFront<P, C, D, R> {
    /// Frees `objs` (object boundaries of this cache, checked by the caller)
    /// under the guard of `cpu`, one detached chain per slab run. `objs` is
    /// used as scratch (reordered). Returns the first error (a foreign slab,
    /// or a slab that had fewer objects out than the chain: a double free);
    /// the other chains are still freed.
    pub(crate) fn free_bulk_pinned(
        &self,
        s: &Slabs<P, C, D, R>,
        cpu: usize,
        objs: &mut [usize],
    ) -> Result<(), FreeError> {
        let mut first = Ok(());
        let mut left = objs.len();
        while left > 0 {
            // Detach: the last object starts a chain; earlier objects of the
            // same slab join it (swapped out of the live part of `objs`).
            left -= 1;
            let tail = objs[left];
            let base = s.geo().base_of(tail);
            let (mut head, mut cnt) = (tail, 1usize);
            let mut misses = 0;
            let mut i = left;
            while i > 0 && misses < LOOKAHEAD {
                i -= 1;
                let o = objs[i];
                if s.geo().base_of(o) != base {
                    misses += 1;
                    continue;
                }
                if o == head {
                    // The same pointer twice in a row: a double free, which
                    // would link the object to itself.
                    first = first.and(Err(FreeError::DoubleFree { ptr: o }));
                } else {
                    // SAFETY: `o` is an object being freed by us; it joins
                    // the chain we own.
                    unsafe { s.codec().set(o, head as u64) };
                    head = o;
                    cnt += 1;
                }
                // The element moved in was scanned already (it lies above `i`).
                left -= 1;
                objs[i] = objs[left];
            }
            if let Err(e) = self.free_chain_pinned(s, cpu, base, head, tail, cnt) {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// Frees the chain `head..=tail` (`cnt` objects of the slab at `base`,
    /// linked except for `tail`'s next pointer) under the guard of `cpu`.
    fn free_chain_pinned(
        &self,
        s: &Slabs<P, C, D, R>,
        cpu: usize,
        base: usize,
        head: usize,
        tail: usize,
        cnt: usize,
    ) -> Result<(), FreeError> {
        let c: &CpuSlab = self.cpu_slab(cpu);
        loop {
            let tid = c.cell.load_hi(Ordering::Acquire);
            let fl = c.cell.load_lo(Ordering::Acquire);
            // `NO_SLAB`'s base is 0, which is no slab's.
            if fl == NO_SLAB || s.geo().base_of(fl as usize) != base {
                break;
            }
            if fl == head as u64 || fl == tail as u64 {
                return Err(FreeError::DoubleFree { ptr: fl as usize });
            }
            // SAFETY: `tail` is an object being freed by us.
            unsafe { s.codec().set(tail, fl) };
            if self.cpu_cas(
                c,
                DoubleWord::new(fl, tid),
                DoubleWord::new(head as u64, self.next_tid(tid)),
            ) {
                s.stat(cpu, StatItem::FreeFastpath);
                return Ok(());
            }
            s.stat(cpu, StatItem::CmpxchgDoubleCpuFail);
        }
        #[cfg(not(feature = "debug"))]
        // SAFETY: the `free_bulk` contract: the objects are in mapped
        // memory (under `debug` the caller checked each one's owner).
        unsafe {
            s.check_owner(head)?
        };
        s.slab_free_chain(base as *mut Slab, head, tail, cnt, false)
    }
}
