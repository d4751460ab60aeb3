//! vmap blocks (`vm_map_ram`): per-CPU blocks for small mappings.
//!
//! A block is one area of [`VMAP_BBMAP_BITS`] pages reserved from vmap-core
//! (aligned to its size, listed as `vmap-block`). Requests of up to
//! [`VMAP_MAX_ALLOC`] pages are carved from a block of the calling CPU under
//! that CPU's lock only: no search of the shared tree. `vm_unmap_ram` clears
//! the entries without a flush and marks the pages *dirty*.
//!
//! Beyond Linux (whose blocks never reuse freed space inside a block), dirty
//! pages become free again once a flush has covered them: when a CPU's blocks
//! have no room, one flush of that CPU's dirty range makes its dirty pages
//! reusable; `vm_unmap_aliases` flushes every CPU's dirty range together with
//! the lazy areas, in one flush. A block whose pages are all dirty and none
//! mapped is retired: it goes on the lazy list as a whole and the next purge
//! flushes and releases it.

use crate::error::VmallocError;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use arch_api::VirtAddr;
use arch_api::sync::{Mutex, RawMutex};

/// Pages per block (Linux's `VMAP_BBMAP_BITS`).
pub const VMAP_BBMAP_BITS: u64 = 256;
/// The largest `vm_map_ram` served from a block, in pages (`VMAP_MAX_ALLOC`);
/// larger requests are plain `vmap`s.
pub const VMAP_MAX_ALLOC: u64 = 64;

const WORDS: usize = (VMAP_BBMAP_BITS / 64) as usize;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Bits([u64; WORDS]);

impl Bits {
    const ALL: Bits = Bits([u64::MAX; WORDS]);

    fn get(&self, i: u64) -> bool {
        self.0[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn set_range(&mut self, start: u64, n: u64, on: bool) {
        for i in start..start + n {
            let (w, b) = ((i / 64) as usize, i % 64);
            if on {
                self.0[w] |= 1 << b;
            } else {
                self.0[w] &= !(1 << b);
            }
        }
    }

    fn all_in(&self, start: u64, n: u64) -> bool {
        (start..start + n).all(|i| self.get(i))
    }

    fn any_in(&self, start: u64, n: u64) -> bool {
        (start..start + n).any(|i| self.get(i))
    }

    fn count(&self) -> u64 {
        self.0.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    /// Lowest run of `n` set bits.
    fn find_run(&self, n: u64) -> Option<u64> {
        let mut run = 0;
        for i in 0..VMAP_BBMAP_BITS {
            if self.get(i) {
                run += 1;
                if run == n {
                    return Some(i + 1 - n);
                }
            } else {
                run = 0;
            }
        }
        None
    }

    /// `[first, last]` page index of the set bits.
    fn span(&self) -> Option<(u64, u64)> {
        let first = (0..VMAP_BBMAP_BITS).find(|&i| self.get(i))?;
        let last = (0..VMAP_BBMAP_BITS).rev().find(|&i| self.get(i))?;
        Some((first, last))
    }

    fn and_not(&mut self, o: &Bits) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a &= !b;
        }
    }

    fn or_and(&mut self, a: &Bits, b: &Bits) {
        for i in 0..WORDS {
            self.0[i] |= a.0[i] & b.0[i];
        }
    }
}

/// One block: which pages are free (flushed), mapped, or dirty (unmapped,
/// not yet flushed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    free: Bits,
    dirty: Bits,
    /// Bumped each time flushed dirty pages become free: a snapshot taken
    /// before that may name pages dirtied again since, which its flush did
    /// not cover.
    epoch: u64,
}

/// One CPU's blocks, by start address.
#[derive(Debug, Default)]
pub(crate) struct CpuBlocks {
    blocks: BTreeMap<u64, Block>,
}

/// A snapshot of each block's dirty bits, by block start.
/// (block start, dirty bits, block epoch).
pub(crate) type DirtySnapshot = Vec<(u64, [u64; WORDS], u64)>;

/// What `unmap` found.
pub(crate) enum Unmapped {
    /// The pages are dirty now.
    Dirty,
    /// The block is all dirty and nothing is mapped: retire it (lazy).
    Retire,
}

impl CpuBlocks {
    /// Carves `n` pages from the lowest block with room: the block start and
    /// the page index.
    pub(crate) fn carve(&mut self, n: u64) -> Option<(u64, u64)> {
        for (start, b) in self.blocks.iter_mut() {
            if let Some(i) = b.free.find_run(n) {
                b.free.set_range(i, n, false);
                return Some((*start, i));
            }
        }
        None
    }

    /// Gives back pages carved but never mapped (a failed map).
    pub(crate) fn uncarve(&mut self, start: u64, i: u64, n: u64) {
        if let Some(b) = self.blocks.get_mut(&start) {
            b.free.set_range(i, n, true);
        }
    }

    /// Adds a new, all-free block.
    pub(crate) fn add(&mut self, start: u64) {
        self.blocks.insert(
            start,
            Block {
                free: Bits::ALL,
                dirty: Bits::default(),
                epoch: 0,
            },
        );
    }

    pub(crate) fn owns(&self, start: u64) -> bool {
        self.blocks.contains_key(&start)
    }

    /// Whether pages `[i, i + n)` of block `start` are mapped.
    pub(crate) fn is_mapped(&self, start: u64, i: u64, n: u64) -> bool {
        i + n <= VMAP_BBMAP_BITS
            && self
                .blocks
                .get(&start)
                .is_some_and(|b| !b.free.any_in(i, n) && !b.dirty.any_in(i, n))
    }

    /// Marks mapped pages `[i, i + n)` dirty (their entries are cleared).
    pub(crate) fn unmap(&mut self, start: u64, i: u64, n: u64) -> Unmapped {
        let Some(b) = self.blocks.get_mut(&start) else {
            return Unmapped::Dirty;
        };
        b.dirty.set_range(i, n, true);
        if b.dirty.all_in(0, VMAP_BBMAP_BITS) {
            self.blocks.remove(&start);
            return Unmapped::Retire;
        }
        Unmapped::Dirty
    }

    /// The union `[start, end)` in bytes of the dirty pages, and a snapshot
    /// of the dirty bits per block.
    pub(crate) fn dirty(&self, page_size: u64) -> (Option<(u64, u64)>, DirtySnapshot) {
        let mut union: Option<(u64, u64)> = None;
        let mut snap = Vec::new();
        for (start, b) in &self.blocks {
            if let Some((f, l)) = b.dirty.span() {
                let (s, e) = (start + f * page_size, start + (l + 1) * page_size);
                union = Some(union.map_or((s, e), |(us, ue)| (us.min(s), ue.max(e))));
                snap.push((*start, b.dirty.0, b.epoch));
            }
        }
        (union, snap)
    }

    /// After a flush that covered the snapshot: its dirty pages are free.
    /// A block whose pages were freed by another flush since the snapshot is
    /// skipped (its dirty pages may be newer than this flush; they wait for
    /// the next one).
    pub(crate) fn flushed(&mut self, snap: &DirtySnapshot) {
        for (start, bits, epoch) in snap {
            if let Some(b) = self.blocks.get_mut(start) {
                if b.epoch != *epoch {
                    continue;
                }
                b.epoch += 1;
                let s = Bits(*bits);
                let d = b.dirty;
                b.free.or_and(&s, &d);
                b.dirty.and_not(&s);
            }
        }
    }

    /// Pages dirty in all blocks (for `vmap_lazy_nr`-style reports).
    pub(crate) fn dirty_pages(&self) -> u64 {
        self.blocks.values().map(|b| b.dirty.count()).sum()
    }

    /// Whether no block has a dirty page.
    #[cfg(test)]
    pub(crate) fn clean(&self) -> bool {
        self.blocks.values().all(|b| b.dirty.is_empty())
    }
}

/// The per-CPU block sets.
pub(crate) struct VmapBlocks<R: RawMutex> {
    pub(crate) cpus: Vec<Mutex<R, CpuBlocks>>,
}

impl<R: RawMutex> VmapBlocks<R> {
    pub(crate) fn new(cpus: usize) -> Self {
        Self {
            cpus: (0..cpus.max(1))
                .map(|_| Mutex::new(CpuBlocks::default()))
                .collect(),
        }
    }

    /// The block half of `vm_map_ram`, shared by both fronts: carves `n`
    /// pages (`1..=VMAP_MAX_ALLOC`, checked by the caller) from `cpu`'s
    /// blocks under that CPU's lock only. When they have no room, one
    /// `flush(start, end)` of the CPU's dirty range makes its dirty pages
    /// reusable; when that is not enough, `new_block()` (the front's own
    /// reservation, which publishes the block) supplies a fresh block.
    /// `map(va)` then maps the frames; if it fails, the pages are given back.
    pub(crate) fn map_ram(
        &self,
        cpu: usize,
        n: u64,
        page_size: u64,
        flush: impl FnOnce(u64, u64),
        new_block: impl FnOnce() -> Result<u64, VmallocError>,
        map: impl FnOnce(VirtAddr) -> Result<(), VmallocError>,
    ) -> Result<VirtAddr, VmallocError> {
        let mut cb = self.cpus[cpu % self.cpus.len()].lock();
        let carved = cb.carve(n).or_else(|| {
            let (dirty, snap) = cb.dirty(page_size);
            let (s, e) = dirty?;
            flush(s, e);
            cb.flushed(&snap);
            cb.carve(n)
        });
        let (bstart, i) = match carved {
            Some(x) => x,
            None => {
                cb.add(new_block()?);
                // Cannot fail: the block is new and n <= VMAP_MAX_ALLOC.
                cb.carve(n).ok_or(VmallocError::ZeroSize)?
            }
        };
        let va = VirtAddr::new(bstart + i * page_size);
        if let Err(e) = map(va) {
            cb.uncarve(bstart, i, n);
            return Err(e);
        }
        Ok(va)
    }

    /// The block half of `vm_unmap_ram`, shared by both fronts: finds the CPU
    /// block holding `count` mapped pages at `addr`, clears their entries with
    /// `unmap(start, end)` under that block's lock, and marks them dirty.
    /// Returns the unmap result and, when every page of the block is now
    /// dirty, the block's start, for the caller to retire onto the lazy list
    /// once the block lock is dropped. Anything but a live block mapping is
    /// `NotFound`, nothing changed.
    pub(crate) fn unmap_ram(
        &self,
        addr: VirtAddr,
        count: u64,
        page_size: u64,
        unmap: impl FnOnce(VirtAddr, VirtAddr) -> Result<(), VmallocError>,
    ) -> (Result<(), VmallocError>, Option<u64>) {
        let not_found = VmallocError::NotFound {
            addr: addr.as_u64(),
        };
        if count == 0 || !addr.is_aligned(page_size) {
            return (Err(not_found), None);
        }
        let bstart = addr.as_u64() & !(VMAP_BBMAP_BITS * page_size - 1);
        let i = (addr.as_u64() - bstart) / page_size;
        for m in &self.cpus {
            let mut cb = m.lock();
            if !cb.owns(bstart) {
                continue;
            }
            if !cb.is_mapped(bstart, i, count) {
                return (Err(not_found), None);
            }
            let r = unmap(addr, VirtAddr::new(addr.as_u64() + count * page_size));
            let retire = matches!(cb.unmap(bstart, i, count), Unmapped::Retire);
            return (r, retire.then_some(bstart));
        }
        (Err(not_found), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carve_dirty_flush_reuse() {
        let mut c = CpuBlocks::default();
        assert!(c.carve(1).is_none());
        c.add(0x10_0000);
        assert_eq!(c.carve(200), Some((0x10_0000, 0)));
        assert_eq!(c.carve(56), Some((0x10_0000, 200)));
        assert!(c.carve(1).is_none(), "full");
        assert!(c.is_mapped(0x10_0000, 10, 5));
        assert!(matches!(c.unmap(0x10_0000, 10, 5), Unmapped::Dirty));
        assert!(!c.is_mapped(0x10_0000, 10, 5));
        assert!(
            c.carve(1).is_none(),
            "dirty pages are not reused before a flush"
        );
        let (u, snap) = c.dirty(4096);
        assert_eq!(u, Some((0x10_0000 + 10 * 4096, 0x10_0000 + 15 * 4096)));
        assert_eq!(c.dirty_pages(), 5);
        c.flushed(&snap);
        assert!(c.clean());
        assert_eq!(c.carve(5), Some((0x10_0000, 10)), "reused once flushed");
        // A stale snapshot (taken before the flush above) frees nothing.
        assert!(matches!(c.unmap(0x10_0000, 10, 5), Unmapped::Dirty));
        c.flushed(&snap);
        assert_eq!(
            c.dirty_pages(),
            5,
            "pages dirtied after the snapshot stay dirty"
        );
        let (_, snap2) = c.dirty(4096);
        c.flushed(&snap2);
        assert_eq!(c.carve(5), Some((0x10_0000, 10)));
        assert!(matches!(c.unmap(0x10_0000, 0, 10), Unmapped::Dirty));
        assert!(matches!(c.unmap(0x10_0000, 15, 185), Unmapped::Dirty));
        assert!(matches!(c.unmap(0x10_0000, 200, 56), Unmapped::Dirty));
        assert!(matches!(c.unmap(0x10_0000, 10, 5), Unmapped::Retire));
        assert!(!c.owns(0x10_0000));
    }
}
