//! Live counts kept beside the page tables, keyed by table frame (Linux keeps
//! per-table metadata in `struct ptdesc`, beside the table page too).
//!
//! The hardware tables hold nothing but entries, at their natural size and
//! alignment, so the walker can work in tables anybody built (the kernel's
//! boot code, the `x86_64` crate, `aarch64-paging`). What the walker knows
//! about a table lives here: its count of present entries inside the
//! walker's window, which lets a zap free a table the moment it becomes empty
//! and stop scanning one whose count reached zero.
//!
//! The store is an open-addressing hash table (linear probing, backward-shift
//! deletion) in pages from the walker's frame source, grown by doubling
//! before a map links anything (so a map that cannot grow it fails with
//! nothing changed). Only the walker's owner touches it, under its `&mut`;
//! [`LeafPath`](crate::LeafPath) never does, which is why last-level tables
//! keep no count once a `LeafPath` exists (see `walker.rs`).
//!
//! Its words are the crate's atomics, accessed relaxed (a plain `mov`), for
//! one reason only: under `--cfg kmm_loom` every frame is loom atomics.

use crate::sync::atomic::{AtomicU64, Ordering};
use arch_api::{FrameError, FrameSource, PhysAddr, PhysMap};

/// Fewest bytes the store is allocated with (8 slots); the first allocation
/// is one granule if that is more.
const MIN_BYTES: u64 = 128;
/// Bytes per slot: the key (`table | 1`; 0 = empty) and the count.
const SLOT_BYTES: u64 = 16;

/// The per-table live counts (see the module docs).
#[derive(Debug)]
pub(crate) struct LiveCounts {
    /// The store's pages (absent until the first table is counted).
    base: Option<PhysAddr>,
    /// Their words, through the frame source's `PhysMap` (a fixed mapping:
    /// looked up once per allocation, not per access).
    words: *const AtomicU64,
    /// Slots, a power of two (0 while absent).
    cap: usize,
    /// Tables counted.
    len: usize,
    /// Bytes allocated for the slots.
    bytes: u64,
    /// Bumped whenever members may have moved (a removal's backward shift,
    /// a growth): a slot index found before is still right while it is the
    /// same.
    moves: u64,
}

impl Default for LiveCounts {
    fn default() -> Self {
        LiveCounts {
            base: None,
            words: core::ptr::null(),
            cap: 0,
            len: 0,
            bytes: 0,
            moves: 0,
        }
    }
}

// SAFETY: the words are frame memory this store allocated and alone uses;
// the pointer is only dereferenced through `&self`/`&mut self` (the walker's
// owner), so moving the store to or sharing it with another thread is as
// safe as for the `Vec` it stands in for.
unsafe impl Send for LiveCounts {}
// SAFETY: as for `Send`: `&self` methods only read.
unsafe impl Sync for LiveCounts {}

impl LiveCounts {
    /// Bytes of frame memory held.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Tables counted.
    #[cfg_attr(any(not(test), kmm_loom), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether no table is counted.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// See the field: equal values mean slot indexes found in between hold.
    #[inline]
    pub(crate) fn moves(&self) -> u64 {
        self.moves
    }

    #[inline]
    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < 2 * self.cap);
        // SAFETY: `words` is the start of this store's `cap * 2` words,
        // allocated from the frame source (8-byte aligned, live until the
        // store is released) and reached through its `PhysMap`; callers
        // pass `i < cap * 2` (slot indexes are masked with `cap - 1`). Only
        // the walker's owner accesses them, always as atomics.
        unsafe { &*self.words.add(i) }
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        // Fibonacci hashing: the top bits of the product; the table frames'
        // low bits (alignment) are all zero and carry nothing.
        let bits = self.cap.trailing_zeros();
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    /// The slot holding `table`, or the empty slot where it would go.
    #[inline]
    fn probe(&self, table: PhysAddr) -> (usize, bool) {
        let key = table.as_u64() | 1;
        let mask = self.cap - 1;
        let mut i = self.home(key);
        loop {
            let k = self.word(2 * i).load(Ordering::Relaxed);
            if k == key {
                return (i, true);
            }
            if k == 0 {
                return (i, false);
            }
            i = (i + 1) & mask;
        }
    }

    /// The slot counting `table`, if it is counted.
    #[inline]
    pub(crate) fn find(&self, table: PhysAddr) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        match self.probe(table) {
            (i, true) => Some(i),
            _ => None,
        }
    }

    /// The value in `slot`.
    #[inline]
    pub(crate) fn value(&self, slot: usize) -> u64 {
        self.word(2 * slot + 1).load(Ordering::Relaxed)
    }

    /// Sets the value in `slot`.
    #[inline]
    pub(crate) fn set_value(&mut self, slot: usize, v: u64) {
        self.word(2 * slot + 1).store(v, Ordering::Relaxed)
    }

    /// The value of `table`, if it is counted.
    #[cfg_attr(any(not(test), kmm_loom), allow(dead_code))]
    #[inline]
    pub(crate) fn get(&self, table: PhysAddr) -> Option<u64> {
        self.find(table).map(|i| self.value(i))
    }

    /// Sets the value of `table`, counting it if it was not; its slot. The
    /// caller [`reserve`](Self::reserve)d room for it. Moves no member.
    #[inline]
    pub(crate) fn insert(&mut self, table: PhysAddr, v: u64) -> usize {
        debug_assert!(
            2 * (self.len + 1) <= self.cap,
            "LiveCounts::insert without reserve"
        );
        let (i, found) = self.probe(table);
        if !found {
            self.word(2 * i)
                .store(table.as_u64() | 1, Ordering::Relaxed);
            self.len += 1;
        }
        self.set_value(i, v);
        i
    }

    /// Stops counting the table in `slot`.
    #[inline]
    pub(crate) fn remove_at(&mut self, slot: usize) {
        self.len -= 1;
        // Backward-shift deletion: move later members of the probe run into
        // the hole while that keeps them reachable from their home slot.
        let mask = self.cap - 1;
        let mut hole = slot;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.word(2 * j).load(Ordering::Relaxed);
            if k == 0 {
                break;
            }
            let home = self.home(k);
            // `k` may fill the hole if its home is not in (hole, j].
            let reachable = if hole <= j {
                home <= hole || home > j
            } else {
                home <= hole && home > j
            };
            if reachable {
                let v = self.value(j);
                self.word(2 * hole).store(k, Ordering::Relaxed);
                self.set_value(hole, v);
                hole = j;
                self.moves += 1;
            }
        }
        self.word(2 * hole).store(0, Ordering::Relaxed);
        self.set_value(hole, 0);
    }

    /// Stops counting `table` if it is counted.
    #[cfg_attr(any(not(test), kmm_loom), allow(dead_code))]
    pub(crate) fn remove(&mut self, table: PhysAddr) {
        if let Some(i) = self.find(table) {
            self.remove_at(i);
        }
    }

    /// Makes room for `extra` more tables (load at most one half), growing
    /// the store from `mem`. On failure nothing changed.
    #[inline]
    pub(crate) fn reserve<M: FrameSource + PhysMap + ?Sized>(
        &mut self,
        mem: &M,
        extra: usize,
    ) -> Result<(), FrameError> {
        if (self.len + extra) * 2 <= self.cap {
            return Ok(());
        }
        self.grow(mem, extra)
    }

    #[cold]
    #[inline(never)]
    fn grow<M: FrameSource + PhysMap + ?Sized>(
        &mut self,
        mem: &M,
        extra: usize,
    ) -> Result<(), FrameError> {
        let want = (self.len + extra) * 2;
        let min = MIN_BYTES.max(mem.granule()) / SLOT_BYTES;
        let cap = (want as u64).next_power_of_two().max(min);
        let bytes = cap * SLOT_BYTES;
        let pa = mem.alloc(bytes, mem.granule().min(bytes))?;
        zero_words(mem, pa, bytes);
        let old = core::mem::replace(
            self,
            LiveCounts {
                base: Some(pa),
                words: mem.phys_to_ptr(pa) as *const AtomicU64,
                cap: cap as usize,
                len: 0,
                bytes,
                moves: self.moves + 1,
            },
        );
        if let Some(old_pa) = old.base {
            for i in 0..old.cap {
                let k = old.word(2 * i).load(Ordering::Relaxed);
                if k != 0 {
                    self.insert(PhysAddr::new(k & !1), old.value(i));
                }
            }
            // The old pages came from this source; if it refuses them back
            // they stay out, which is all that can be done here.
            let _ = mem.free(old_pa, old.bytes);
        }
        Ok(())
    }

    /// Forgets every table and returns the store's pages to `mem`; the
    /// address of the pages on failure.
    pub(crate) fn release<M: FrameSource + PhysMap + ?Sized>(
        &mut self,
        mem: &M,
    ) -> Result<(), (PhysAddr, FrameError)> {
        let moves = self.moves + 1;
        let old = core::mem::replace(
            self,
            LiveCounts {
                moves,
                ..LiveCounts::default()
            },
        );
        match old.base {
            Some(pa) => mem.free(pa, old.bytes).map_err(|e| (pa, e)),
            None => Ok(()),
        }
    }
}

/// Zeroes the `bytes` bytes just allocated at `pa` (frames are not zeroed
/// by the source).
#[cfg(not(kmm_loom))]
pub(crate) fn zero_words<M: PhysMap + ?Sized>(mem: &M, pa: PhysAddr, bytes: u64) {
    let p = mem.phys_to_ptr(pa);
    // SAFETY: the source just handed out `bytes` bytes at `pa`, reachable
    // through `p`; nothing else uses them yet (nothing links or counts
    // them), so a plain write is fine.
    unsafe { p.write_bytes(0, bytes as usize) };
}

/// Zeroes the words just allocated at `pa`. Under loom frame memory is loom
/// atomics, which a byte write would destroy: store each word.
#[cfg(kmm_loom)]
pub(crate) fn zero_words<M: PhysMap + ?Sized>(mem: &M, pa: PhysAddr, bytes: u64) {
    let p = mem.phys_to_ptr(pa) as *const AtomicU64;
    for i in 0..(bytes / 8) as usize {
        // SAFETY: the source just handed out `bytes` bytes at `pa`, 8-byte
        // aligned words reached through `p`; `i < bytes / 8`.
        unsafe { &*p.add(i) }.store(0, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use arch_api::PhysArena;
    use std::collections::HashMap;

    /// A random mix of sets, adds and removes against a `HashMap`, with
    /// growth from the first slot to several pages and keys that collide
    /// in their home slot.
    #[test]
    fn matches_a_hash_map_through_growth_and_deletion() {
        let mem = PhysArena::new(4 << 20, 4096).unwrap();
        let mut c = LiveCounts::default();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let steps = if cfg!(miri) { 1_000 } else { 20_000u64 };
        for step in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // 2 000 distinct table frames, some in long probe runs.
            let table = PhysArena::BASE.as_u64() + (x % 2000) * 4096;
            let pa = PhysAddr::new(table);
            match step % 5 {
                0 | 1 => {
                    c.reserve(&mem, 1).unwrap();
                    c.insert(pa, step);
                    model.insert(table, step);
                }
                2 if model.contains_key(&table) => {
                    let i = c.find(pa).unwrap();
                    c.set_value(i, c.value(i) + 3);
                    *model.get_mut(&table).unwrap() += 3;
                }
                _ => {
                    c.remove(pa);
                    model.remove(&table);
                }
            }
            assert_eq!(c.len(), model.len());
        }
        for (&k, &v) in &model {
            assert_eq!(c.get(PhysAddr::new(k)), Some(v));
        }
        for k in 0..2000u64 {
            let table = PhysArena::BASE.as_u64() + k * 4096;
            assert_eq!(c.get(PhysAddr::new(table)), model.get(&table).copied());
        }
        assert!(c.bytes() > 4096, "grew past one page");
        c.release(&mem).unwrap();
        assert_eq!(mem.bytes_in_use(), 0, "every store page went back");
    }

    #[test]
    fn a_failed_growth_changes_nothing() {
        let mem = PhysArena::new(8192, 4096).unwrap();
        let mut c = LiveCounts::default();
        c.reserve(&mem, 100).unwrap(); // 4 KiB: 256 slots
        for k in 0..128u64 {
            c.insert(PhysAddr::new(k * 4096), k);
        }
        let hog = mem.alloc(4096, 4096).unwrap();
        assert!(c.reserve(&mem, 1).is_err());
        assert_eq!(c.len(), 128);
        assert_eq!(c.get(PhysAddr::new(5 * 4096)), Some(5));
        mem.free(hog, 4096).unwrap();
        c.release(&mem).unwrap();
    }
}
