//! Partial slabs: the node partial list (under the node's `list_lock`), the
//! per-CPU partial lists (under the CpuLocal guard), freezing a slab for a
//! CPU and `deactivate_slab` (unfreezing it again).
//!
//! Invariant (under the node lock): an unfrozen slab with a non-empty
//! freelist is on the node partial list; an unfrozen full slab is on no list
//! (a remote free that makes it non-full puts it back); a frozen slab belongs
//! to exactly one CPU (its current slab or its partial list). Every change
//! that moves a slab between these states takes the node lock *before* the
//! slab-level CAS that decides it, as Linux does.

use super::Slabs;
use crate::cpu_local::CpuLocal;
use crate::freelist::end_token;
use crate::page_source::PageSource;
use crate::slab::{Counters, Slab};
use crate::stats::StatItem;
use crate::sync::UnsafeCellPtr;
use arch_api::sync::{Mutex, MutexGuard, RawMutex};
use arch_api::{DoubleWord, DwCas};
use core::cell::UnsafeCell;
use core::ptr::null_mut;
use core::sync::atomic::Ordering;

/// The node partial list.
pub(crate) struct PartialList {
    head: *mut Slab,
    tail: *mut Slab,
    pub(crate) nr: usize,
}

// SAFETY: the list only holds pointers to slabs the cache owns; it is only
// reached through the node mutex.
unsafe impl Send for PartialList {}

impl PartialList {
    /// Adds `s` at the head (`add_partial`).
    ///
    /// # Safety
    /// Under the node lock; `s` is a live slab on no list.
    pub(crate) unsafe fn add(&mut self, s: *mut Slab) {
        // SAFETY: the caller holds the node lock, which protects the links.
        unsafe {
            (*s).prev.set(null_mut());
            (*s).next.set(self.head);
            if self.head.is_null() {
                self.tail = s;
            } else {
                (*self.head).prev.set(s);
            }
            *(*s).on_partial.get() = true;
        }
        self.head = s;
        self.nr += 1;
    }

    /// Removes `s` (`remove_partial`).
    ///
    /// # Safety
    /// Under the node lock; `s` is on this list.
    pub(crate) unsafe fn remove(&mut self, s: *mut Slab) {
        // SAFETY: the caller holds the node lock; `s` and its neighbours are
        // live slabs on this list.
        unsafe {
            let (prev, next) = ((*s).prev.get(), (*s).next.get());
            if prev.is_null() {
                self.head = next;
            } else {
                (*prev).next.set(next);
            }
            if next.is_null() {
                self.tail = prev;
            } else {
                (*next).prev.set(prev);
            }
            (*s).next.set(null_mut());
            (*s).prev.set(null_mut());
            *(*s).on_partial.get() = false;
        }
        self.nr -= 1;
    }

    /// The first slab, or null.
    pub(crate) fn first(&self) -> *mut Slab {
        self.head
    }

    /// Whether `s` is on the list.
    ///
    /// # Safety
    /// Under the node lock.
    pub(crate) unsafe fn contains(&self, s: *mut Slab) -> bool {
        // SAFETY: the flag is protected by the node lock the caller holds.
        unsafe { *(*s).on_partial.get() }
    }
}

/// A memory node (`struct kmem_cache_node`); this crate has one.
pub(crate) struct Node<R: RawMutex> {
    pub(crate) list: Mutex<R, PartialList>,
}

impl<R: RawMutex> Node<R> {
    pub(crate) fn new() -> Self {
        Self {
            list: Mutex::new(PartialList {
                head: null_mut(),
                tail: null_mut(),
                nr: 0,
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, R, PartialList> {
        self.list.lock()
    }

    /// The lock if it is free now (the nolock paths never wait for it).
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, R, PartialList>> {
        self.list.try_lock()
    }

    /// Partial slabs and the free objects on them (for slabinfo).
    pub(crate) fn partial_summary(&self) -> (usize, usize) {
        let n = self.lock();
        (n.nr, {
            let mut s = n.head;
            let mut free = 0;
            while !s.is_null() {
                // SAFETY: under the node lock every slab on the list is live
                // and its links are stable.
                let c = Counters(unsafe { (*s).state.load_hi(Ordering::Acquire) });
                free += c.objects() - c.inuse();
                // SAFETY: as above.
                s = unsafe { (*s).next.get() };
            }
            free
        })
    }
}

/// One CPU's partial list (`kmem_cache_cpu::partial`): frozen slabs,
/// linked through `Slab::next`, kept by the front that owns the CPU's slab
/// and filled by [`Slabs::get_partial_node`]. Protected by that CPU's guard.
pub(crate) struct CpuPartial {
    head: UnsafeCellPtr<Slab>,
    nr: UnsafeCell<usize>,
}

impl CpuPartial {
    pub(crate) const fn new() -> Self {
        Self {
            head: UnsafeCellPtr::null(),
            nr: UnsafeCell::new(0),
        }
    }

    /// Pushes frozen slab `s`.
    ///
    /// # Safety
    /// Under the guard of the CPU owning the list (or exclusive access); `s`
    /// is frozen for that CPU and on no other list.
    pub(crate) unsafe fn push(&self, s: *mut Slab) {
        // SAFETY: the guard makes the list ours; `s` is a live slab.
        unsafe {
            (*s).next.set(self.head.get());
            self.head.set(s);
            *self.nr.get() += 1;
        }
    }

    /// Pops a slab.
    ///
    /// # Safety
    /// As [`push`](Self::push).
    pub(crate) unsafe fn pop(&self) -> Option<*mut Slab> {
        // SAFETY: as for `push`.
        unsafe {
            let s = self.head.get();
            if s.is_null() {
                return None;
            }
            self.head.set((*s).next.get());
            (*s).next.set(null_mut());
            *self.nr.get() -= 1;
            Some(s)
        }
    }

    /// Slabs on the list.
    ///
    /// # Safety
    /// As [`push`](Self::push).
    pub(crate) unsafe fn len(&self) -> usize {
        // SAFETY: as for `push`.
        unsafe { *self.nr.get() }
    }
}

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> Slabs<P, C, D, R> {
    /// `get_partial_node`: freezes the first node partial slab for the CPU,
    /// taking its whole freelist, and moves up to `cpu_partial` more (frozen,
    /// freelists left in place) onto the CPU partial list `cp`, whose CPU's
    /// guard the caller holds.
    pub(crate) fn get_partial_node(&self, cp: &CpuPartial) -> Option<(*mut Slab, u64)> {
        let mut n = self.node.lock();
        let mut got = None;
        while got.is_none() {
            let s = n.head;
            if s.is_null() {
                return None;
            }
            // SAFETY: under the node lock; `s` is on the list.
            unsafe { n.remove(s) };
            // SAFETY: `s` is a live slab; its state cell is always valid.
            let st = unsafe { &(*s).state };
            let end = end_token(s as usize);
            loop {
                let hi = st.load_hi(Ordering::Acquire);
                let lo = st.load_lo(Ordering::Acquire);
                let cnt = Counters(hi);
                if lo == end {
                    // Cannot happen by the invariant; leave the full slab
                    // off the list unfrozen, as a full slab should be.
                    break;
                }
                let new = DoubleWord::new(end, cnt.next(cnt.objects(), true).0);
                if D::compare_exchange(st, DoubleWord::new(lo, hi), new).is_ok() {
                    got = Some((s, lo));
                    break;
                }
            }
        }
        // SAFETY: the caller holds the guard of the CPU owning `cp`.
        while unsafe { cp.len() } < self.cpu_partial {
            let s = n.head;
            if s.is_null() {
                break;
            }
            // SAFETY: under the node lock; `s` is on the list.
            unsafe { n.remove(s) };
            // SAFETY: live slab.
            let st = unsafe { &(*s).state };
            loop {
                let hi = st.load_hi(Ordering::Acquire);
                let lo = st.load_lo(Ordering::Acquire);
                let cnt = Counters(hi);
                let new = DoubleWord::new(lo, cnt.next(cnt.inuse(), true).0);
                if D::compare_exchange(st, DoubleWord::new(lo, hi), new).is_ok() {
                    break;
                }
            }
            // SAFETY: guard held by the caller; `s` is frozen and off lists.
            unsafe { cp.push(s) };
        }
        got
    }

    /// `deactivate_slab`: unfreezes frozen slab `x`, first merging back a
    /// detached CPU freelist `(head, tail, count)` of its objects, then puts
    /// it on the node partial list, returns it to the page source (empty and
    /// the node has `min_partial` others) or leaves it off-list (full).
    pub(crate) fn deactivate(&self, x: *mut Slab, chain: Option<(usize, usize, usize)>) {
        // SAFETY: `x` is a live slab frozen by the caller's CPU.
        let st = unsafe { &(*x).state };
        let end = end_token(x as usize);
        let mut guard = None;
        let (new_lo, new_c) = loop {
            let hi = st.load_hi(Ordering::Acquire);
            let lo = st.load_lo(Ordering::Acquire);
            let c = Counters(hi);
            let (nlo, inuse) = match chain {
                Some((head, tail, n)) => {
                    // SAFETY: `tail` ends our detached chain of x's objects.
                    unsafe { self.codec.set(tail, lo) };
                    (head as u64, c.inuse().saturating_sub(n))
                }
                None => (lo, c.inuse()),
            };
            let nc = c.next(inuse, false);
            if nlo != end && guard.is_none() {
                guard = Some(self.node.lock());
                continue;
            }
            let cur = if crate::loom_hooks::deactivate_blind_store() {
                // Broken variant: recompute nothing, overwrite whatever is
                // there now (loses a remote free that raced in).
                // (The yield is the time between computing and storing, made
                // a scheduling point so the model checker interleaves there.)
                #[cfg(kmm_loom)]
                loom::thread::yield_now();
                st.load()
            } else {
                DoubleWord::new(lo, hi)
            };
            if D::compare_exchange(st, cur, DoubleWord::new(nlo, nc.0)).is_ok() {
                break (nlo, nc);
            }
        };
        match guard {
            Some(mut n) if new_lo != end => {
                if new_c.inuse() == 0 && n.nr >= self.min_partial {
                    drop(n);
                    self.discard_slab(x);
                    self.stat_here(StatItem::DeactivateEmpty);
                } else {
                    // SAFETY: under the node lock; x is unfrozen, on no list.
                    unsafe { n.add(x) };
                    self.stat_here(StatItem::DeactivateToPartial);
                }
            }
            _ => self.stat_here(StatItem::DeactivateFull),
        }
    }

    /// Returns every empty slab on the node partial list to the page source.
    pub(crate) fn discard_empty_partials(&self) -> usize {
        let mut victims: *mut Slab = null_mut();
        let mut count = 0;
        {
            let mut n = self.node.lock();
            let mut s = n.head;
            while !s.is_null() {
                // SAFETY: under the node lock; `s` is on the list.
                let next = unsafe { (*s).next.get() };
                // SAFETY: live slab.
                let c = Counters(unsafe { (*s).state.load_hi(Ordering::Acquire) });
                if c.inuse() == 0 && !c.frozen() {
                    // SAFETY: under the node lock. With no object in use no
                    // free can touch it, and freezing needs this lock.
                    unsafe {
                        n.remove(s);
                        (*s).next.set(victims);
                    }
                    victims = s;
                    count += 1;
                }
                s = next;
            }
        }
        while !victims.is_null() {
            // SAFETY: the victims are ours now (off every list, empty).
            let next = unsafe { (*victims).next.get() };
            self.discard_slab(victims);
            victims = next;
        }
        count
    }
}
