//! Lazy-free accounting: each node's lazy list and `vmap_lazy_nr`.
//!
//! A freed area is unmapped at once but its virtual range stays reserved on
//! its node's lazy list until a purge has flushed the TLB for it.
//! `vmap_lazy_nr` counts the pages on the lists; the purge policy reads it.
//!
//! Each node keeps its list, its count of lazy pages and its record of
//! areas in a [`NodeLazy`] under the node's own lock (the front's lazy
//! slot), so a `vfree` writes nothing another node's CPU writes. The shared
//! counter the policy reads ([`LazyCount`]) is fed in batches, as Linux's
//! `percpu_counter`: a node adds its pages once they reach the batch (1 on a
//! one-node front, so the counter is exact there), short by less than one
//! batch per node.
//!
//! The ordering is the point (Linux's 2010 lazy-free accounting had "a racy
//! flag then atomic add": `vmap_lazy_nr` went wrong when a purge ran between
//! the two steps). Here a node's list, its count and its share of the
//! shared counter change together, inside one critical section of the
//! node's lock: [`NodeLazy::publish`] adds to the shared counter before the
//! lock is dropped, and a purge takes a list and the pages it had added to
//! the shared counter under the same lock. A purge therefore subtracts only
//! pages already added: the counter never underflows, and no page stays
//! counted that no list holds. Adding after the lock is dropped (the 2.6.34
//! order, "publish, then count") lets a purge take the area and subtract
//! its pages before they were added. The loom models
//! (`tests/loom_lazy_purge*.rs`) check both orders on this code.

use crate::area_table::AreaTable;
use crate::sync::atomic::{AtomicU64, Ordering};
use alloc::vec::Vec;

/// One lazily freed area on a lazy list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LazyRange {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Pages counted in `vmap_lazy_nr` for it.
    pub pages: u64,
    /// Bytes of guard before `start`: the front's area starts at
    /// `start - lead` (a stack's guard page; usually 0).
    pub lead: u64,
    /// Whether the virtual range was already released (only the
    /// deliberately broken test order does that; feature `testing`).
    pub released: bool,
}

/// One node's lazy-free state: its areas, its lazy list and its count of
/// lazy pages. The front keeps it under the node's lock; vmalloc reaches it
/// through [`VmapNodes::with_lazy`](vmap_core::VmapNodes::with_lazy).
#[derive(Debug, Default)]
pub struct NodeLazy {
    /// The node's areas, live and lazy, by start address (`vfree`'s one
    /// search).
    pub(crate) areas: AreaTable,
    lazy: Vec<LazyRange>,
    /// Pages on `lazy`.
    lazy_pages: u64,
    /// The part of `lazy_pages` not yet added to the shared counter.
    unfolded: u64,
}

/// The shared `vmap_lazy_nr` the purge trigger reads, fed by the nodes in
/// batches.
#[derive(Debug)]
pub struct LazyCount {
    nr: AtomicU64,
    underflows: AtomicU64,
    batch: u64,
}

impl LazyCount {
    /// A zero counter that nodes feed every `batch` pages (at least 1).
    pub fn new(batch: u64) -> Self {
        Self {
            nr: AtomicU64::new(0),
            underflows: AtomicU64::new(0),
            batch: batch.max(1),
        }
    }

    /// The pages the nodes have added (each node may hold back less than a
    /// batch).
    pub fn nr(&self) -> u64 {
        self.nr.load(Ordering::Acquire)
    }

    /// Times a purge subtracted more than was added (0 unless the
    /// accounting is broken).
    pub fn underflows(&self) -> u64 {
        self.underflows.load(Ordering::Relaxed)
    }

    /// After the node's lock is dropped: adds what
    /// [`NodeLazy::publish`] left to add (nothing, unless a broken test
    /// variant is active).
    #[inline]
    pub fn add_late(&self, pages: u64) {
        if pages != 0 {
            self.nr.fetch_add(pages, Ordering::AcqRel);
        }
    }

    /// A purge is done with lists that had added `folded` pages: subtract
    /// them.
    pub fn retire(&self, folded: u64) {
        if self.nr.fetch_sub(folded, Ordering::AcqRel) < folded {
            self.underflows.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl NodeLazy {
    /// Puts `r` on this node's lazy list and counts its pages; the caller
    /// holds the node's lock. Returns pages the caller must add with
    /// [`LazyCount::add_late`] after dropping the lock (always 0 in the
    /// shipped order).
    pub(crate) fn publish(&mut self, r: LazyRange, shared: &LazyCount) -> u64 {
        self.lazy.push(r);
        self.lazy_pages += r.pages;
        #[cfg(kmm_loom)]
        if crate::loom_mutation::MUTATION.active(crate::loom_mutation::PUBLISH_BEFORE_COUNT) {
            // Mutation: the 2.6.34 order; the pages count as added (a purge
            // will subtract them) but are added only after the lock drops.
            return r.pages;
        }
        self.unfolded += r.pages;
        if self.unfolded >= shared.batch {
            // Inside the lock: the purge that takes these pages back takes
            // the lock after this add.
            shared
                .nr
                .fetch_add(core::mem::take(&mut self.unfolded), Ordering::AcqRel);
        }
        0
    }

    /// Takes the lazy list; the caller holds the node's lock. Returns the
    /// list and the pages it had added to the shared counter (to
    /// [`LazyCount::retire`] once the flush is done).
    pub(crate) fn take(&mut self) -> (Vec<LazyRange>, u64) {
        let folded = self.lazy_pages - self.unfolded;
        self.lazy_pages = 0;
        self.unfolded = 0;
        (core::mem::take(&mut self.lazy), folded)
    }

    /// Pages on this node's lazy list.
    pub(crate) fn lazy_pages(&self) -> u64 {
        self.lazy_pages
    }
}

/// The accounting for the loom models (`tests/loom_lazy_purge*.rs`).
#[cfg(kmm_loom)]
impl NodeLazy {
    /// [`publish`](Self::publish).
    pub fn loom_publish(&mut self, r: LazyRange, shared: &LazyCount) -> u64 {
        self.publish(r, shared)
    }

    /// [`take`](Self::take).
    pub fn loom_take(&mut self) -> (Vec<LazyRange>, u64) {
        self.take()
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;

    fn r(start: u64, pages: u64) -> LazyRange {
        LazyRange {
            start,
            end: start + pages * 4096,
            pages,
            lead: 0,
            released: false,
        }
    }

    #[test]
    fn publish_feeds_the_shared_count_in_batches_and_take_balances() {
        let shared = LazyCount::new(4);
        let mut n = NodeLazy::default();
        assert_eq!(n.publish(r(0x10000, 2), &shared), 0);
        assert_eq!((shared.nr(), n.lazy_pages()), (0, 2), "under a batch");
        assert_eq!(n.publish(r(0x20000, 3), &shared), 0);
        assert_eq!(shared.nr(), 5, "a batch reached: all of it added");
        n.publish(r(0x30000, 1), &shared);
        let (list, folded) = n.take();
        assert_eq!((list.len(), folded, n.lazy_pages()), (3, 5, 0));
        shared.retire(folded);
        assert_eq!((shared.nr(), shared.underflows()), (0, 0));
        shared.retire(1);
        assert_eq!(shared.underflows(), 1, "an over-subtraction is recorded");
    }
}
