//! The side store of live counts (see `walker.rs`): one word per frame of
//! the frame source's range, indexed by frame number as Linux's `struct
//! page` array is, when the source can tell its range
//! ([`FrameSource::phys_range`]); the hash of `counts.rs` for the rest.
//!
//! Why two: the story-2 cycle (map 4 pages far apart, zap them) links and
//! frees 9 tables per cycle, and a hash insert, lookup and backward-shift
//! removal for each cost ~10 % of the cycle, where an indexed word costs a
//! subtraction, a compare and a shift. Every table the walker allocates
//! comes from the source, so it always falls in the array; the hash stays
//! for tables other code linked from memory outside it (boot tables met by
//! [`attach`](crate::Walker::attach)), and for every table when the source
//! cannot tell its range or the array could not be allocated.
//!
//! The array is allocated from the source, lazily, when the store is empty
//! and first asked for room (so a walker that never maps holds none), and
//! kept until the store is released. Its words hold the value with
//! [`PRESENT`] set, so that a counted table whose value is 0 is told from a
//! frame that is no table. While the array exists no table inside its range
//! is in the hash: it is only set up while the store counts nothing.

use crate::counts::{LiveCounts, zero_words};
use crate::sync::atomic::{AtomicU64, Ordering};
use arch_api::{FrameError, FrameSource, PhysAddr, PhysMap};

/// Set in every used word of the array (values use the bits below it).
const PRESENT: u64 = 1 << 62;
/// Set in a slot index that names a hash slot (clear: an array index).
const HASHED: usize = 1 << (usize::BITS - 1);

/// The direct array (all zero fields while absent: every address misses).
#[derive(Debug)]
struct Direct {
    words: *const AtomicU64,
    /// Physical address of frame 0.
    base: u64,
    /// Bytes covered from `base` (0 while absent).
    limit: u64,
    /// `log2(granule)`: frame number from offset.
    shift: u32,
    /// The array's own frames, and their size.
    pa: Option<PhysAddr>,
    bytes: u64,
    /// Tables counted in it.
    len: usize,
}

impl Default for Direct {
    fn default() -> Self {
        Direct {
            words: core::ptr::null(),
            base: 0,
            limit: 0,
            shift: 0,
            pa: None,
            bytes: 0,
            len: 0,
        }
    }
}

/// The per-table live counts (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct SideStore {
    direct: Direct,
    hash: LiveCounts,
    /// Whether setting up the array was tried since the store was released
    /// (a source without a range, or one that refused it, is not asked
    /// again until then).
    tried: bool,
}

// SAFETY: the array is frame memory this store allocated and alone uses;
// its pointer is only dereferenced through `&self`/`&mut self` (the
// walker's owner), as for `LiveCounts`, which is `Send` for that reason.
unsafe impl Send for SideStore {}
// SAFETY: as for `Send`: `&self` methods only read.
unsafe impl Sync for SideStore {}

impl SideStore {
    /// Bytes of frame memory held (array and hash).
    pub(crate) fn bytes(&self) -> u64 {
        self.direct.bytes + self.hash.bytes()
    }

    /// Tables counted.
    #[cfg_attr(any(not(test), kmm_loom), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.direct.len + self.hash.len()
    }

    /// Whether no table is counted.
    pub(crate) fn is_empty(&self) -> bool {
        self.direct.len == 0 && self.hash.is_empty()
    }

    /// Equal values mean slot indexes found in between still hold (array
    /// slots never move; see `LiveCounts::moves` for the hash's).
    #[inline]
    pub(crate) fn moves(&self) -> u64 {
        self.hash.moves()
    }

    /// Whether `slot` is an index into the array (which never moves).
    #[inline(always)]
    pub(crate) fn is_array_slot(slot: usize) -> bool {
        slot & HASHED == 0
    }

    /// Whether `slot`, found when [`moves`](Self::moves) was `moves`, still
    /// holds its table: array slots always do.
    #[inline(always)]
    pub(crate) fn still_at(&self, slot: usize, moves: u64) -> bool {
        slot & HASHED == 0 || moves == self.hash.moves()
    }

    /// The array index of `table`, if the array covers it.
    #[inline(always)]
    fn index(&self, table: PhysAddr) -> Option<usize> {
        let off = table.as_u64().wrapping_sub(self.direct.base);
        if off < self.direct.limit {
            Some((off >> self.direct.shift) as usize)
        } else {
            None
        }
    }

    #[inline(always)]
    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!((i as u64) < self.direct.limit >> self.direct.shift);
        // SAFETY: `words` is the start of the array, one word per frame of
        // the `limit` bytes covered, allocated from the frame source
        // (granule-aligned, live until the store is released) and reached
        // through its `PhysMap`; every index comes from `index`, which
        // checked the offset against `limit`. Only the walker's owner
        // accesses the words, always as atomics.
        unsafe { &*self.direct.words.add(i) }
    }

    /// The slot counting `table` and its value, if it is counted.
    #[inline(always)]
    pub(crate) fn lookup(&self, table: PhysAddr) -> Option<(usize, u64)> {
        match self.index(table) {
            Some(i) => {
                let w = self.word(i).load(Ordering::Relaxed);
                (w != 0).then_some((i, w & !PRESENT))
            }
            None => self
                .hash
                .find(table)
                .map(|j| (j | HASHED, self.hash.value(j))),
        }
    }

    /// The slot counting `table`, if it is counted.
    #[inline]
    pub(crate) fn find(&self, table: PhysAddr) -> Option<usize> {
        self.lookup(table).map(|(i, _)| i)
    }

    /// The value of `table`, if it is counted.
    #[inline]
    pub(crate) fn get(&self, table: PhysAddr) -> Option<u64> {
        self.lookup(table).map(|(_, v)| v)
    }

    /// The value in `slot`.
    #[inline(always)]
    pub(crate) fn value(&self, slot: usize) -> u64 {
        if slot & HASHED != 0 {
            self.hash.value(slot & !HASHED)
        } else {
            self.word(slot).load(Ordering::Relaxed) & !PRESENT
        }
    }

    /// Sets the value in `slot` (`v` below bit 62).
    #[inline(always)]
    pub(crate) fn set_value(&mut self, slot: usize, v: u64) {
        debug_assert!(v & PRESENT == 0);
        if slot & HASHED != 0 {
            self.hash.set_value(slot & !HASHED, v)
        } else {
            self.word(slot).store(v | PRESENT, Ordering::Relaxed)
        }
    }

    /// Sets the value of `table`, counting it if it was not; its slot. Room
    /// was reserved for it ([`reserve_new`](Self::reserve_new) for a table
    /// from the source, [`reserve_for`](Self::reserve_for) otherwise).
    /// Moves no member.
    #[inline(always)]
    pub(crate) fn insert(&mut self, table: PhysAddr, v: u64) -> usize {
        debug_assert!(v & PRESENT == 0);
        match self.index(table) {
            Some(i) => {
                let w = self.word(i);
                if w.load(Ordering::Relaxed) == 0 {
                    self.direct.len += 1;
                }
                self.word(i).store(v | PRESENT, Ordering::Relaxed);
                i
            }
            None => self.hash.insert(table, v) | HASHED,
        }
    }

    /// Counts `table`, which the walker just allocated from the source and
    /// so is not counted (its count went when it was freed): as
    /// [`insert`](Self::insert) without reading the word first.
    #[inline(always)]
    pub(crate) fn insert_new(&mut self, table: PhysAddr, v: u64) {
        debug_assert!(v & PRESENT == 0 && self.find(table).is_none());
        match self.index(table) {
            Some(i) => {
                self.direct.len += 1;
                self.word(i).store(v | PRESENT, Ordering::Relaxed);
            }
            None => {
                self.hash.insert(table, v);
            }
        }
    }

    /// Stops counting the table in `slot`.
    #[inline(always)]
    pub(crate) fn remove_at(&mut self, slot: usize) {
        if slot & HASHED != 0 {
            self.hash.remove_at(slot & !HASHED)
        } else {
            self.direct.len -= 1;
            self.word(slot).store(0, Ordering::Relaxed)
        }
    }

    /// Stops counting `table` if it is counted.
    #[cfg(all(test, not(kmm_loom)))]
    pub(crate) fn remove(&mut self, table: PhysAddr) {
        if let Some(i) = self.find(table) {
            self.remove_at(i);
        }
    }

    /// Makes room for `tables` more tables allocated from `mem` (which lie
    /// in the array once it exists). On failure nothing changed.
    #[inline]
    pub(crate) fn reserve_new<M: FrameSource + PhysMap + ?Sized>(
        &mut self,
        mem: &M,
        tables: usize,
    ) -> Result<(), FrameError> {
        if !self.tried {
            self.set_up_direct(mem);
        }
        if self.direct.limit != 0 {
            return Ok(());
        }
        self.hash.reserve(mem, tables)
    }

    /// Makes room for `tables` more tables linked by other code, anywhere.
    pub(crate) fn reserve_foreign<M: FrameSource + PhysMap + ?Sized>(
        &mut self,
        mem: &M,
        tables: usize,
    ) -> Result<(), FrameError> {
        if !self.tried {
            self.set_up_direct(mem);
        }
        self.hash.reserve(mem, tables)
    }

    /// Makes room for `table`'s count.
    pub(crate) fn reserve_for<M: FrameSource + PhysMap + ?Sized>(
        &mut self,
        mem: &M,
        table: PhysAddr,
    ) -> Result<(), FrameError> {
        if !self.tried {
            self.set_up_direct(mem);
        }
        if self.index(table).is_some() {
            return Ok(());
        }
        self.hash.reserve(mem, 1)
    }

    /// Allocates the array for `mem`'s range if it tells one, the store is
    /// empty and the source has the memory; else the hash does all.
    #[cold]
    #[inline(never)]
    fn set_up_direct<M: FrameSource + PhysMap + ?Sized>(&mut self, mem: &M) {
        self.tried = true;
        // Only an empty store: a table counted in the hash must not get a
        // second, array word.
        if !self.is_empty() {
            return;
        }
        let Some(range) = mem.phys_range() else {
            return;
        };
        let granule = mem.granule();
        let base = range.start.as_u64() & !(granule - 1);
        let limit = range.end.as_u64().saturating_sub(base);
        let frames = limit.div_ceil(granule);
        let Some(bytes) = frames
            .checked_mul(8)
            .and_then(|b| b.checked_next_multiple_of(granule))
        else {
            return;
        };
        if frames == 0 || usize::try_from(frames).is_err() {
            return;
        }
        let Ok(pa) = mem.alloc(bytes, granule) else {
            return; // the hash will do
        };
        zero_words(mem, pa, bytes);
        self.direct = Direct {
            words: mem.phys_to_ptr(pa) as *const AtomicU64,
            base,
            limit: frames * granule,
            shift: granule.trailing_zeros(),
            pa: Some(pa),
            bytes,
            len: 0,
        };
    }

    /// Forgets every table and returns the store's pages to `mem`; the
    /// address of the first the source refused.
    pub(crate) fn release<M: FrameSource + PhysMap + ?Sized>(
        &mut self,
        mem: &M,
    ) -> Result<(), (PhysAddr, FrameError)> {
        let direct = core::mem::take(&mut self.direct);
        self.tried = false;
        let hash = self.hash.release(mem);
        let array = match direct.pa {
            Some(pa) => mem.free(pa, direct.bytes).map_err(|e| (pa, e)),
            None => Ok(()),
        };
        array.and(hash)
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use arch_api::PhysArena;
    use std::collections::HashMap;

    /// `mem` without its range: the store must fall back to the hash.
    struct NoRange<'a>(&'a PhysArena);

    impl FrameSource for NoRange<'_> {
        fn granule(&self) -> u64 {
            self.0.granule()
        }
        fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
            self.0.alloc(size, align)
        }
        fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
            self.0.free(addr, size)
        }
    }

    impl PhysMap for NoRange<'_> {
        fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
            self.0.phys_to_ptr(addr)
        }
        fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
            self.0.ptr_to_phys(ptr)
        }
    }

    /// Sets, adds and removes of tables inside and outside the arena
    /// against a `HashMap`; values 0 included (the `PRESENT` bit's case).
    fn against_a_hash_map<M: FrameSource + PhysMap>(mem: &M, expect_array: bool) {
        let mut c = SideStore::default();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let steps = if cfg!(miri) { 800 } else { 20_000u64 };
        // 300 frames in the arena and 300 boot-table frames below it.
        let key = |k: u64| {
            if k < 300 {
                PhysArena::BASE.as_u64() + k * 4096
            } else {
                (k - 300) * 4096
            }
        };
        for step in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let table = key(x % 600);
            let pa = PhysAddr::new(table);
            match step % 5 {
                0 | 1 => {
                    if x % 600 < 300 {
                        c.reserve_new(mem, 1).unwrap();
                    } else {
                        c.reserve_for(mem, pa).unwrap();
                    }
                    c.insert(pa, step % 3);
                    model.insert(table, step % 3);
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
        for k in 0..600 {
            let table = key(k);
            assert_eq!(c.get(PhysAddr::new(table)), model.get(&table).copied());
        }
        assert_eq!(c.direct.pa.is_some(), expect_array);
        c.release(mem).unwrap();
        assert!(c.is_empty() && c.bytes() == 0);
    }

    #[test]
    fn array_and_hash_match_a_hash_map() {
        let arena = PhysArena::new(4 << 20, 4096).unwrap();
        against_a_hash_map(&arena, true);
        assert_eq!(arena.bytes_in_use(), 0, "every store page went back");
    }

    #[test]
    fn a_source_without_a_range_gets_the_hash_alone() {
        let arena = PhysArena::new(4 << 20, 4096).unwrap();
        against_a_hash_map(&NoRange(&arena), false);
        assert_eq!(arena.bytes_in_use(), 0);
    }

    #[test]
    fn no_memory_for_the_array_falls_back_to_the_hash() {
        // 4 MiB of frames need a 8 KiB array; leave one frame free.
        let arena = PhysArena::new(4 << 20, 4096).unwrap();
        let hog = arena.alloc((4 << 20) - 4096, 4096).unwrap();
        let mut c = SideStore::default();
        c.reserve_new(&arena, 1).unwrap();
        assert!(c.direct.pa.is_none(), "no room for the array");
        let t = PhysAddr::new(PhysArena::BASE.as_u64() + 4096);
        c.insert(t, 0);
        assert_eq!(c.get(t), Some(0));
        assert_eq!(c.bytes(), 4096, "the hash's one page");
        c.release(&arena).unwrap();
        arena.free(hog, (4 << 20) - 4096).unwrap();
        // Released, the store tries the array again.
        c.reserve_new(&arena, 1).unwrap();
        assert!(c.direct.pa.is_some());
        c.release(&arena).unwrap();
        assert_eq!(arena.bytes_in_use(), 0);
    }
}
