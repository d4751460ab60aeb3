//! Per-node, size-segregated pools of recently freed areas (1..=256 pages),
//! like Linux 6.9's `vmap_node.pool`: a free of a common size parks the area
//! (it stays busy in its slice but leaves the slice's busy tree, as Linux's
//! pooled areas leave `vn->busy.root`, so lookups do not pay for parked
//! areas) and the next allocation of that size on the node takes it back
//! without searching for space or touching shared state.

use crate::node::NodeIdx;
use alloc::vec::Vec;

/// Largest pooled size, in pages.
pub(crate) const MAX_POOL_PAGES: usize = 256;

/// One parked area: its slice number, its busy node there, its start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolEntry {
    pub(crate) slice: u64,
    pub(crate) node: NodeIdx,
    pub(crate) start: u64,
}

/// Per-size stacks of parked areas.
pub(crate) struct Pool {
    classes: Vec<Vec<PoolEntry>>,
    depth: usize,
    len: usize,
}

impl Pool {
    /// A pool keeping at most `depth` areas per size class (0 disables it).
    pub(crate) fn new(depth: usize) -> Self {
        let mut classes = Vec::new();
        if depth > 0 {
            classes.resize_with(MAX_POOL_PAGES, Vec::new);
        }
        Self {
            classes,
            depth,
            len: 0,
        }
    }

    /// The class of an area of `pages` pages, if pooled sizes include it.
    #[inline]
    pub(crate) fn class(&self, pages: u64) -> Option<usize> {
        (self.depth > 0 && (1..=MAX_POOL_PAGES as u64).contains(&pages)).then(|| pages as usize - 1)
    }

    /// Whether class `c` has room.
    #[inline]
    pub(crate) fn has_room(&self, c: usize) -> bool {
        self.classes[c].len() < self.depth
    }

    #[inline]
    pub(crate) fn push(&mut self, c: usize, e: PoolEntry) {
        self.classes[c].push(e);
        self.len += 1;
    }

    /// Takes the most recently parked entry of class `c` that `ok` accepts
    /// (looking at the top few only: the pool is a cache, not a search).
    #[inline]
    pub(crate) fn take(&mut self, c: usize, ok: impl Fn(u64) -> bool) -> Option<PoolEntry> {
        let v = &mut self.classes[c];
        // The usual case first: the top entry fits (a plain request).
        let top = v.last()?;
        if ok(top.start) {
            self.len -= 1;
            return v.pop();
        }
        let n = v.len();
        let pos = (n.saturating_sub(4)..n - 1)
            .rev()
            .find(|&k| ok(v[k].start))?;
        self.len -= 1;
        Some(v.swap_remove(pos))
    }

    /// Removes the entries of slice `slice` overlapping `[lo, hi)` and hands
    /// each to `f` (an exact request for a range that is parked: the range
    /// is free to the caller, the pool only remembered it). Looks at every
    /// entry, so only the exact-address path, which is rare, calls it.
    pub(crate) fn take_overlapping(
        &mut self,
        slice: u64,
        lo: u64,
        hi: u64,
        page_size: u64,
        mut f: impl FnMut(PoolEntry),
    ) {
        let mut taken = 0;
        for (c, v) in self.classes.iter_mut().enumerate() {
            let bytes = (c as u64 + 1) * page_size;
            v.retain(|e| {
                let hit = e.slice == slice && e.start < hi && e.start + bytes > lo;
                if hit {
                    f(*e);
                    taken += 1;
                }
                !hit
            });
        }
        self.len -= taken;
    }

    /// Removes the oldest quarter (rounded up, so that a pool of any length
    /// empties) of every class, or every entry when `full`, and hands each
    /// to `f`.
    pub(crate) fn decay(&mut self, full: bool, mut f: impl FnMut(PoolEntry)) {
        let mut taken = 0;
        for v in &mut self.classes {
            let n = if full { v.len() } else { v.len().div_ceil(4) };
            // The stacks grow at the end: the oldest entries are in front.
            v.drain(..n).for_each(&mut f);
            taken += n;
        }
        self.len -= taken;
    }

    /// Entries currently parked.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Removes every entry.
    pub(crate) fn take_all(&mut self) -> Vec<PoolEntry> {
        let mut out = Vec::with_capacity(self.len);
        for v in &mut self.classes {
            out.append(v);
        }
        self.len = 0;
        out
    }

    /// The first `n` entries in `take_all` order, without removing them
    /// (only the broken drain of the loom model uses it).
    #[cfg(kmm_loom)]
    pub(crate) fn snapshot(&self) -> Vec<PoolEntry> {
        self.classes.iter().flatten().copied().collect()
    }

    /// The entries [`decay`](Self::decay) would take, without taking them
    /// (only the broken decay of the loom model uses it).
    #[cfg(kmm_loom)]
    pub(crate) fn peek_decay(&self, full: bool) -> Vec<PoolEntry> {
        let mut out = Vec::new();
        for v in &self.classes {
            let n = if full { v.len() } else { v.len().div_ceil(4) };
            out.extend_from_slice(&v[..n]);
        }
        out
    }

    /// Drops every entry without releasing it (broken drain only).
    #[cfg(kmm_loom)]
    pub(crate) fn clear(&mut self) {
        for v in &mut self.classes {
            v.clear();
        }
        self.len = 0;
    }
}
