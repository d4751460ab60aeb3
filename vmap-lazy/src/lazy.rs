//! Lazy-free accounting: `vmap_lazy_nr` and the per-node lazy lists.
//!
//! A freed area is unmapped at once but its virtual range stays reserved on a
//! lazy list until a purge has flushed the TLB for it. `vmap_lazy_nr` counts
//! the pages on the lists; the purge policy reads it.
//!
//! The ordering is the point (Linux's 2010 lazy-free accounting had "a racy
//! flag then atomic add": `vmap_lazy_nr` went wrong when a purge ran between
//! the two steps):
//! [`add`](LazyAccount::add) counts the pages FIRST and only then publishes
//! the area on a list. A purge can only take areas that are published, so it
//! only ever subtracts pages already counted: the counter never underflows,
//! and between the two steps it over-counts by at most the pages of the areas
//! in flight (a purge may come a little early, never a page forgotten).
//! Publishing first (the 2.6.34 order) lets a purge take the area and
//! subtract its pages before they were added: the counter wraps below zero
//! and the later add leaves pages counted that no list holds. The loom models
//! (`tests/loom_lazy_purge*.rs`) check both orders.

use crate::sync::atomic::{AtomicU64, Ordering};
use alloc::vec::Vec;
use arch_api::sync::{Mutex, RawMutex};

/// One lazily freed area on a lazy list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LazyRange {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Pages counted in `vmap_lazy_nr` for it.
    pub pages: u64,
    /// Whether the virtual range was already released (only a deliberately
    /// broken policy does that; see `PurgePolicy::release_before_flush`).
    pub released: bool,
}

/// What one purge took off the lazy lists.
#[derive(Debug, Default)]
pub struct PurgeBatch {
    /// The areas, in no particular order.
    pub ranges: Vec<LazyRange>,
    /// Their pages in total.
    pub pages: u64,
    /// The union range `[start, end)` one flush must cover.
    pub start: u64,
    /// End of the union range.
    pub end: u64,
}

/// `vmap_lazy_nr` and the lazy lists of `nodes` vmap nodes.
pub struct LazyAccount<R: RawMutex> {
    nr: AtomicU64,
    underflows: AtomicU64,
    lists: Vec<Mutex<R, Vec<LazyRange>>>,
}

impl<R: RawMutex> core::fmt::Debug for LazyAccount<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LazyAccount")
            .field("vmap_lazy_nr", &self.nr())
            .field("nodes", &self.lists.len())
            .field("underflows", &self.underflows())
            .finish()
    }
}

impl<R: RawMutex> LazyAccount<R> {
    /// Empty lists for `nodes` vmap nodes (at least 1).
    pub fn new(nodes: usize) -> Self {
        Self {
            nr: AtomicU64::new(0),
            underflows: AtomicU64::new(0),
            lists: (0..nodes.max(1)).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// `vmap_lazy_nr`: pages lazily freed and not yet purged (the value may
    /// include areas being added right now).
    pub fn nr(&self) -> u64 {
        self.nr.load(Ordering::Acquire)
    }

    /// Times a purge subtracted more than was counted (0 unless the
    /// accounting is broken).
    pub fn underflows(&self) -> u64 {
        self.underflows.load(Ordering::Relaxed)
    }

    /// Adds a freed area to node `node`'s list (`node` taken modulo the
    /// number of lists): count, then publish.
    pub fn add(&self, node: usize, r: LazyRange) {
        let list = &self.lists[node % self.lists.len()];
        #[cfg(kmm_loom)]
        if crate::loom_mutation::MUTATION.active(crate::loom_mutation::PUBLISH_BEFORE_COUNT) {
            // Mutation: the 2.6.34 order (mark lazy / publish, then add).
            list.lock().push(r);
            self.nr.fetch_add(r.pages, Ordering::AcqRel);
            return;
        }
        self.nr.fetch_add(r.pages, Ordering::AcqRel);
        list.lock().push(r);
    }

    /// Takes every node's list (one purge covers them all); `None` when all
    /// are empty. The pages stay counted until [`retire`](Self::retire).
    pub fn take(&self) -> Option<PurgeBatch> {
        let mut batch = PurgeBatch {
            ranges: Vec::new(),
            pages: 0,
            start: u64::MAX,
            end: 0,
        };
        for list in &self.lists {
            let mut l = list.lock();
            if l.is_empty() {
                continue;
            }
            if batch.ranges.is_empty() {
                core::mem::swap(&mut batch.ranges, &mut l);
            } else {
                batch.ranges.append(&mut l);
            }
        }
        if batch.ranges.is_empty() {
            return None;
        }
        for r in &batch.ranges {
            batch.pages += r.pages;
            batch.start = batch.start.min(r.start);
            batch.end = batch.end.max(r.end);
        }
        Some(batch)
    }

    /// A purge of `pages` pages is complete: subtract them.
    pub fn retire(&self, pages: u64) {
        let prev = self.nr.fetch_sub(pages, Ordering::AcqRel);
        if prev < pages {
            self.underflows.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Pages on the lists right now (locks each list; for checks).
    pub fn listed_pages(&self) -> u64 {
        self.lists
            .iter()
            .map(|l| l.lock().iter().map(|r| r.pages).sum::<u64>())
            .sum()
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use arch_api::sync::DefaultRawMutex;

    fn r(start: u64, pages: u64) -> LazyRange {
        LazyRange {
            start,
            end: start + pages * 4096,
            pages,
            released: false,
        }
    }

    #[test]
    fn take_unions_all_nodes_and_retire_balances() {
        let a = LazyAccount::<DefaultRawMutex>::new(3);
        assert!(a.take().is_none());
        a.add(0, r(0x10000, 2));
        a.add(2, r(0x4000, 1));
        a.add(5, r(0x20000, 4)); // node 5 % 3 == 2
        assert_eq!(a.nr(), 7);
        assert_eq!(a.listed_pages(), 7);
        let b = a.take().expect("three areas");
        assert_eq!(b.ranges.len(), 3);
        assert_eq!((b.start, b.end, b.pages), (0x4000, 0x24000, 7));
        assert_eq!(a.listed_pages(), 0);
        assert_eq!(a.nr(), 7, "pages stay counted until retired");
        a.retire(b.pages);
        assert_eq!((a.nr(), a.underflows()), (0, 0));
        a.retire(1);
        assert_eq!(a.underflows(), 1, "an over-subtraction is recorded");
    }
}
