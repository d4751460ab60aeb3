//! The CPU's detached freelist: frees of objects outside the CPU slab are
//! linked here, per CPU, and given back to their slab a chain at a time.
//!
//! Why not straight to the slab, as Linux's `__slab_free` does: that is a
//! LOCKed DW-CAS on the slab per object, and a LOCKed instruction waits for
//! the store before it (the object's free pointer, on a line the
//! allocating CPU read last) to reach this CPU's cache. A consumer freeing
//! a producer's objects paid one such cross-CPU line transfer per object,
//! back to back: 80-110 ns per remote free in kmem-bench against 13 ns for
//! the same stores without a LOCKed instruction between them
//! (BENCHMARKS.md, session 26). Linked into this CPU's chain with the
//! per-CPU CAS (no LOCK where only the owner writes the cell), the stores
//! overlap; the chain then costs one `__slab_free` (Linux's
//! `build_detached_freelist`, which `kmem_cache_free_bulk` builds for a
//! batch, here built by the run of frees a CPU makes into one slab). Only
//! backends whose CPU cells only their owner writes
//! ([`CpuLocal::OWNER_ONLY_WRITES`]) detach: elsewhere the per-CPU CAS is
//! LOCKed too, and such frees go straight to the slab as before.
//!
//! The cell is `(head, hi)`: lo `NO_SLAB`, or the head of a chain of
//! objects of one slab ending in that slab's end token; hi the chain's
//! length (low 32 bits) and a sequence number stepped on every update, so
//! that a push from a task an interrupt preempted fails its CAS and
//! retries even with a DW-CAS that compares `hi` alone (ia64's
//! `cmp8xchg16`). The tid's other job, catching a migration, is not
//! needed: only owner-only backends detach, and their tasks do not
//! migrate inside a fast path. Pushes and the take-over of the whole
//! chain are the only updates, so a head that comes back (ABA) is still a
//! valid chain to push onto or take. The length lets a chain into a slab
//! with no free objects become its freelist without a walk. A chain is
//! given back when a free to another slab starts a new one,
//! when the CPU needs a new slab ([`TidFront::alloc_pinned`]) and when
//! the CPU is flushed; until then its objects count as in use, as objects
//! on a CPU freelist do. Each chain's slab is checked to be this cache's
//! (its header's magic) when the chain starts; the objects that join it
//! are of the same slab.

use super::{CpuSlab, TidFront};
use crate::cpu_local::CpuLocal;
use crate::error::FreeError;
use crate::freelist::{NO_SLAB, end_token};
use crate::page_source::PageSource;
use crate::slab::Slab;
use crate::slabs::Slabs;
use crate::stats::StatItem;
use arch_api::sync::RawMutex;
use arch_api::{DoubleWord, DwCas};
use core::sync::atomic::Ordering;

/// The length of the chain whose cell's hi is `hi`.
#[inline(always)]
fn len(hi: u64) -> usize {
    hi as u32 as usize
}

/// The hi of the cell's next state, after `hi`, for a chain of `len`.
#[inline(always)]
fn next_hi(hi: u64, len: usize) -> u64 {
    if crate::loom_hooks::detached_seq_not_bumped() {
        // Broken variant: the length alone.
        return (hi >> 32 << 32) | len as u64;
    }
    ((hi >> 32).wrapping_add(1) << 32) | len as u64
}

/// What a fast-path free onto the detached freelist did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detach {
    /// Freed: the object joined the chain of its slab.
    Done,
    /// Freed: the object started a new chain; the previous chain, whose
    /// head and length these are, is the caller's to give back
    /// ([`TidFront::give_back_detached`]).
    Flush(u64, usize),
    /// Take the slow path (a foreign slab, the object already
    /// heading the chain or its slab's freelist, a chain as long as its
    /// slab has objects, a lost CAS), which starts over.
    Slow,
}

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> TidFront<P, C, D, R> {
    /// Whether frees of other slabs' objects go onto the detached freelist:
    /// where only the owner writes a CPU's cells, so that its CAS has no
    /// LOCK. Elsewhere the push would be a LOCKed DW-CAS as well, and the
    /// chain would save nothing: those frees go straight to their slab.
    #[inline(always)]
    pub(crate) const fn detaches(&self) -> bool {
        C::OWNER_ONLY_WRITES
    }

    /// Frees `p` (an object boundary outside the CPU slab, checked by the
    /// caller) onto the detached freelist of `cpu` (the fast path's CPU id),
    /// in one try.
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) fn detach_fast(&self, s: &Slabs<P, C, D, R>, cpu: usize, p: usize) -> Detach {
        let c = self.cpu_slab(cpu);
        let hi = c.detached.load_hi(Ordering::Acquire);
        let head = c.detached.load_lo(Ordering::Acquire);
        let base = s.geo().base_of(p);
        // `NO_SLAB`'s base is 0, which is no slab's.
        let (next, n) = if s.geo().base_of(head as usize) == base {
            (head, len(hi) + 1)
        } else {
            // SAFETY: the `free` contract: `p` is in mapped memory.
            if unsafe { s.check_owner(p) }.is_err() {
                return Detach::Slow;
            }
            (end_token(base), 1)
        };
        // A double free of the object heading the chain or its slab's own
        // freelist (the header's line, read anyway for the chain's check)
        // is for the slow path to report; a chain longer than a slab (a
        // double free deeper in it, repeated) would be too.
        if head == p as u64 || s.heads_slab_freelist(p) || n > s.geo().objects {
            return Detach::Slow;
        }
        // SAFETY: `p` is an object of a slab of this cache, being freed by
        // us.
        unsafe { s.codec().set(p, next) };
        #[cfg(any(kmm_loom, feature = "testing"))]
        s.cpus()
            .preempt_point(crate::testing::PreemptPoint::FreeWindow);
        if !Self::local_cas(
            &c.detached,
            DoubleWord::new(head, hi),
            DoubleWord::new(p as u64, next_hi(hi, n)),
        ) {
            s.stat(cpu, StatItem::CmpxchgDoubleCpuFail);
            return Detach::Slow;
        }
        s.stat(cpu, StatItem::FreeFastpath);
        if next == head || head == NO_SLAB {
            Detach::Done
        } else {
            Detach::Flush(head, len(hi))
        }
    }

    /// Takes CPU `cpu`'s detached freelist over (the cell left empty):
    /// its head and length, or `None` if it had none. Under the guard of
    /// `cpu`, or with exclusive access.
    pub(crate) fn take_detached(&self, cpu: usize) -> Option<(u64, usize)> {
        let c: &CpuSlab = self.cpu_slab(cpu);
        loop {
            let hi = c.detached.load_hi(Ordering::Acquire);
            let head = c.detached.load_lo(Ordering::Acquire);
            if head == NO_SLAB {
                return None;
            }
            let cur = if crate::loom_hooks::detached_take_two_step() {
                // Broken variant: whatever the cell holds by now.
                c.detached.load()
            } else {
                DoubleWord::new(head, hi)
            };
            if Self::local_cas(
                &c.detached,
                cur,
                DoubleWord::new(NO_SLAB, next_hi(cur.hi, 0)),
            ) {
                return Some((head, len(hi)));
            }
        }
    }

    /// Gives a detached chain (`head`, `n` objects long, taken over by the
    /// caller) back to its slab with one `__slab_free`; a slab it makes
    /// partial goes on the partial list of `pinned`, the CPU whose guard
    /// the caller holds, or of the CPU the caller runs on. A chain a double
    /// free corrupted (one whose walk, when its tail is needed, finds a
    /// loop or another length), or one longer than its slab has objects
    /// out, is not given back: its slab stays in use (leaked rather than
    /// handed out twice), as with a corrupt CPU freelist.
    #[cold]
    #[inline(never)]
    pub(crate) fn give_back_detached(
        &self,
        s: &Slabs<P, C, D, R>,
        head: u64,
        n: usize,
        pinned: Option<usize>,
    ) -> Result<(), FreeError> {
        let x = s.geo().base_of(head as usize) as *mut Slab;
        if let Some(x) = s.free_detached_chain(x, head as usize, n)? {
            self.put_frozen(s, x, pinned);
        }
        Ok(())
    }

    /// Gives CPU `cpu`'s detached freelist back, if it has one (nothing to
    /// do, not even a load, on a backend that does not detach). Under the
    /// guard of `cpu`, or with exclusive access.
    pub(crate) fn flush_detached(&self, s: &Slabs<P, C, D, R>, cpu: usize) {
        if !self.detaches() {
            return;
        }
        if let Some((head, n)) = self.take_detached(cpu) {
            // An error is a chain a double free corrupted: left in use.
            let _ = self.give_back_detached(s, head, n, Some(cpu));
        }
    }

    /// Whether `p` heads CPU `cpu`'s detached freelist: freeing it again
    /// is a double free. (Never, and no load, on a backend that does not
    /// detach.)
    #[inline]
    pub(crate) fn heads_detached(&self, cpu: usize, p: usize) -> bool {
        self.detaches() && self.cpu_slab(cpu).detached.load_lo(Ordering::Acquire) == p as u64
    }
}
