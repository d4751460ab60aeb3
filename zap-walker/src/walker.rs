//! The walker: its tables, how entries are read and written, and the live
//! counts that let it skip what is known to be empty.
//!
//! # Entry access
//!
//! Entries are `u64` words in table pages reached through
//! [`PhysMap::phys_to_ptr`], and they are read and written as `AtomicU64`, not
//! through volatile accesses. The MMU walks them concurrently with us and may
//! set accessed/dirty bits in a live entry; an atomic access is a single,
//! untorn 64-bit load or store that the compiler may neither split, merge nor
//! elide (on x86_64 and aarch64 a relaxed or acquire load is a plain `mov` /
//! `ldar`), and clearing a leaf with an atomic `swap` returns the entry as it
//! was at the instant it vanished, A/D bits included (Linux's
//! `ptep_get_and_clear`). Volatile would also stop elision, but it makes no
//! atomicity promise and a volatile access racing with another thread's
//! software walk is a data race. A table pointer is published with a release
//! store after the table was zeroed, and read with an acquire load, so a
//! concurrent software walker never sees the old contents of a recycled page.
//!
//! The atomic type comes from the [`arch_api::sync`] shim: under `--cfg
//! loom` it is loom's, and table memory must then be loom atomics (see
//! `tests/loom_common`), so one source is both the shipped code and the
//! model.
//!
//! # Live counts (the shadow)
//!
//! Every table above the last level is allocated with a *shadow* of the same
//! size right after it: word `i` of the shadow counts the present entries of
//! the child table that entry `i` points to (the root's own count is kept in
//! the walker). The MMU never reads the shadow. The counts let a zap free a
//! table the moment it becomes empty without rescanning it (Linux's
//! `free_pgtables` only frees tables wholly inside the unmapped range; here a
//! partial zap frees them too), and let a walk stop scanning a table whose
//! count reached zero: the rest of it is known to be empty. The last level has
//! no shadow, so the overhead is one page per table *above* the last level,
//! about 1/512 of the table memory of a 4 KiB layout.
//!
//! # Two roots when the halves alias
//!
//! On aarch64 `TTBR0_EL1` and `TTBR1_EL1` translate the low and high halves
//! with the same index bits, so `0x0000_8000_0000_0000` and
//! `0xffff_8000_0000_0000` would land on the same root entry. The walker
//! detects that from the layout alone (both `0` and `-tree_span` canonical)
//! and keeps one root per half, selected by bit 63. x86_64 sign-extends, so
//! its halves use distinct root entries and it keeps one root (one CR3).

use crate::errors::WalkError;
use crate::stats::WalkStats;
use crate::stock::TableStock;
use arch_api::sync::atomic::{AtomicU64, Ordering};
use arch_api::{
    EntryKind, FrameError, FrameSource, MapFlags, PageTableEntry, PageTableLayout, PhysAddr,
    PhysMap, VirtAddr,
};
use core::marker::PhantomData;

/// The most levels a layout may have (x86_64 LA57 has 5).
pub const MAX_LEVELS: usize = 6;

/// A table page as the walker sees it: the entries (read by the MMU) and,
/// above the last level, the shadow of live counts (read by nobody else).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableRef {
    entries: *const AtomicU64,
    shadow: *const AtomicU64,
    len: usize,
}

impl TableRef {
    /// The table whose entries start at `entries` (`len` of them), with its
    /// shadow right after them if `shadow`.
    #[inline]
    pub(crate) fn new(entries: *mut u8, len: usize, shadow: bool) -> Self {
        let entries = entries as *const AtomicU64;
        let shadow = if shadow {
            entries.wrapping_add(len)
        } else {
            core::ptr::null()
        };
        TableRef {
            entries,
            shadow,
            len,
        }
    }

    /// The table of layout `L` at `level` whose entries start at `entries`
    /// (a shadow above the last level).
    #[inline]
    pub(crate) fn of<L: PageTableLayout>(entries: *mut u8, level: usize) -> Self {
        Self::new(entries, L::entries(level), level + 1 < L::LEVELS)
    }

    /// Entry `i` as an atomic.
    #[inline]
    fn entry(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < self.len);
        // SAFETY: `entries` points at a live table page of `len` u64 words,
        // 8-byte aligned (tables are aligned to their size; `AtomicU64` has
        // the size and alignment of `u64` where it exists), owned by the
        // walker for as long as it is linked; `i < len` because every index
        // comes from `PageTableLayout::index`, which masks with
        // `entries(level) - 1`. All accesses to a linked table are atomic.
        unsafe { &*self.entries.add(i) }
    }

    /// Loads entry `i` (acquire: a table pointer read here may be followed).
    #[inline]
    pub(crate) fn load(self, i: usize) -> u64 {
        self.entry(i).load(Ordering::Acquire)
    }

    /// Stores entry `i` (release: the table it may point to is zeroed first).
    #[inline]
    pub(crate) fn store(self, i: usize, v: u64) {
        self.entry(i).store(v, Ordering::Release)
    }

    /// Replaces entry `i`, returning the value it had at that instant.
    #[inline]
    pub(crate) fn swap(self, i: usize, v: u64) -> u64 {
        self.entry(i).swap(v, Ordering::AcqRel)
    }

    /// Shadow word `i` as an atomic.
    #[inline]
    fn live_word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < self.len && !self.shadow.is_null());
        // SAFETY: tables above the last level are allocated with a shadow of
        // `len` words right after the entries (8-byte aligned, live as long
        // as the table is linked). They are accessed only as atomics: the
        // walker under its owner's lock and, for a last-level table's count,
        // [`LeafPath`](crate::LeafPath) users on other CPUs at the same time.
        unsafe { &*self.shadow.add(i) }
    }

    /// Sets entry `i` to `v` if it is empty (0); whether it was. A load and
    /// a store, not a compare-exchange: the caller owns the page (the
    /// [`LeafPath`](crate::LeafPath) contract), so nobody else fills the
    /// slot in between, and a LOCKed instruction per page is what the
    /// unlocked path exists to save. The check only declines a range that
    /// is not empty.
    #[inline]
    pub(crate) fn install(self, i: usize, v: u64) -> bool {
        if self.load(i) != 0 {
            return false;
        }
        self.store(i, v);
        true
    }

    /// Empties entry `i` of a page the caller owns and returns what it
    /// held: a load and a store, for the reason given at
    /// [`install`](Self::install).
    #[inline]
    pub(crate) fn take(self, i: usize) -> u64 {
        let old = self.load(i);
        if old != 0 {
            self.store(i, 0);
        }
        old
    }

    /// Live entries of the child table behind entry `i`. Relaxed: a count
    /// is only ever read to skip work by its owner, who changes it by
    /// deltas (see [`adjust_live`](Self::adjust_live)).
    #[inline]
    pub(crate) fn live(self, i: usize) -> u64 {
        self.live_word(i).load(Ordering::Relaxed)
    }

    /// Sets the live count of the child behind entry `i`: only while no
    /// other CPU can reach the child (it is new, or about to be unlinked).
    #[inline]
    pub(crate) fn set_live(self, i: usize, v: u64) {
        self.live_word(i).store(v, Ordering::Relaxed)
    }

    /// Adds `n` (wrapping: a subtraction is the negated delta) to the live
    /// count behind entry `i`. A delta, not a store of a snapshot: a
    /// [`LeafPath`](crate::LeafPath) may change the same count (other
    /// entries of the same last-level table) meanwhile. An atomic
    /// read-modify-write only when `shared`, i.e. once a `LeafPath` may
    /// change counts too. Otherwise the walker's owner is the only writer and a
    /// load and a store do, which keeps LOCKed instructions off a plain
    /// map/unmap (on x86_64 each costs about 20 cycles).
    #[inline]
    pub(crate) fn adjust_live(self, i: usize, n: u64, shared: bool) {
        let w = self.live_word(i);
        if shared {
            w.fetch_add(n, Ordering::Relaxed);
        } else {
            w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }

    /// Whether every entry (and shadow word) is zero (`debug` checks).
    #[cfg_attr(not(feature = "debug"), allow(dead_code))]
    pub(crate) fn all_zero(self) -> bool {
        (0..self.len).all(|i| self.load(i) == 0 && (self.shadow.is_null() || self.live(i) == 0))
    }
}

/// Maps, translates and zaps ranges of one address space of layout `L`,
/// with table pages from `M`.
///
/// The walker owns its table pages and the frames mapped through it: a zap
/// returns both to `M` (frames of leaves mapped with [`MapFlags::DEVICE`]
/// excepted: they are MMIO, not memory from the source). Dropping the walker
/// frees everything it still holds without flushing any TLB; the caller must
/// have stopped using the tables (switched CR3/TTBR away) first.
pub struct Walker<'m, L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> {
    pub(crate) mem: &'m M,
    roots: [PhysAddr; 2],
    /// Roots allocated so far (1, or 2 when the halves alias).
    n_roots: usize,
    pub(crate) root_live: [u64; 2],
    split_halves: bool,
    pub(crate) free_empty_tables: bool,
    /// Set once a [`LeafPath`](crate::LeafPath) exists: no table is freed
    /// again.
    pub(crate) tables_pinned: bool,
    tables_in_use: u64,
    table_bytes_in_use: u64,
    pub(crate) stats: WalkStats,
    /// The first free the source refused during a zap, reported at its end.
    pub(crate) free_error: Option<WalkError>,
    /// Zeroed table pages kept for reuse (`stock.rs`); off unless asked for.
    pub(crate) stock: TableStock,
    _layout: PhantomData<fn() -> L>,
}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> core::fmt::Debug for Walker<'_, L, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Walker")
            .field("layout", &L::NAME)
            .field("roots", &self.roots())
            .field("tables_in_use", &self.tables_in_use)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<'m, L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'m, L, M> {
    /// A walker with empty root table(s) allocated from `mem`. Freeing
    /// tables that become empty is on.
    pub fn new(mem: &'m M) -> Result<Self, WalkError> {
        let granule = mem.granule();
        if L::LEVELS == 0
            || L::LEVELS > MAX_LEVELS
            || !granule.is_power_of_two()
            || granule > L::PAGE_SIZE
            || L::level_shift(0) >= 64
        {
            return Err(WalkError::Unsupported);
        }
        let mut w = Walker {
            mem,
            roots: [PhysAddr::new(0); 2],
            n_roots: 0,
            root_live: [0; 2],
            split_halves: Self::halves_alias(),
            free_empty_tables: true,
            tables_pinned: false,
            tables_in_use: 0,
            table_bytes_in_use: 0,
            stats: WalkStats::default(),
            free_error: None,
            stock: TableStock::default(),
            _layout: PhantomData,
        };
        let want = if w.split_halves { 2 } else { 1 };
        while w.n_roots < want {
            // On failure, dropping `w` frees the roots already allocated.
            w.roots[w.n_roots] = w.alloc_table(0).map_err(WalkError::OutOfTables)?;
            w.n_roots += 1;
        }
        Ok(w)
    }

    /// Whether the low and high canonical halves share root indices (see the
    /// module docs): then each half gets its own root, as TTBR0/TTBR1.
    fn halves_alias() -> bool {
        let tree_bits = L::level_shift(0) + L::INDEX_BITS[0];
        if tree_bits >= 64 {
            return false;
        }
        let high = 0u64.wrapping_sub(1 << tree_bits);
        L::is_canonical(VirtAddr::new(0)) && L::is_canonical(VirtAddr::new(high))
    }

    /// The root table translating `va`: what CR3 / TTBR points at.
    pub fn root(&self, va: VirtAddr) -> PhysAddr {
        self.roots[self.half(va.as_u64())]
    }

    /// Every root: one, or two when the layout's halves alias (aarch64:
    /// `[TTBR0, TTBR1]`).
    pub fn roots(&self) -> &[PhysAddr] {
        &self.roots[..self.n_roots]
    }

    #[inline]
    pub(crate) fn half(&self, va: u64) -> usize {
        if self.split_halves {
            (va >> 63) as usize
        } else {
            0
        }
    }

    /// Whether zaps free table pages that become empty (default on). Off, the
    /// tables stay allocated, empty, for a later map (Linux keeps them until
    /// `free_pgtables` at munmap; vmalloc never frees kernel tables). Stays
    /// off once a [`LeafPath`](crate::LeafPath) was made.
    pub fn set_free_empty_tables(&mut self, on: bool) {
        self.free_empty_tables = on && !self.tables_pinned;
    }

    /// Table pages allocated and linked (roots included; stocked pages are
    /// not in use, see [`stocked_tables`](Self::stocked_tables)).
    pub fn tables_in_use(&self) -> u64 {
        self.tables_in_use
    }

    /// Bytes of page-table memory held, shadows and the zeroed-table stock
    /// included (the figure Linux's 2024 per-node vmap split kept in check:
    /// ~132 MB of page-table pages in its `test_vmalloc` run on 128 CPUs).
    pub fn pagetable_bytes(&self) -> u64 {
        self.table_bytes_in_use + self.stock_bytes()
    }

    /// Table pages beyond the root(s): 0 once everything is unmapped with
    /// freeing of empty tables on.
    pub fn tables_below_root(&self) -> u64 {
        self.tables_in_use - self.roots().len() as u64
    }

    /// The cumulative counters.
    pub fn stats(&self) -> WalkStats {
        self.stats
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) {
        self.stats = WalkStats::default();
    }

    /// The frame source.
    pub fn mem(&self) -> &'m M {
        self.mem
    }

    // ---- tables ----

    /// Whether a table at `level` carries a shadow (it has child tables).
    #[inline]
    pub(crate) fn has_shadow(level: usize) -> bool {
        level + 1 < L::LEVELS
    }

    /// Bytes allocated for a table at `level`: the table, its shadow, rounded
    /// up to the granule. Both are powers of two, so this is one too, and the
    /// allocation is aligned to it (tables must be aligned to their size).
    pub(crate) fn alloc_bytes(&self, level: usize) -> u64 {
        let t = L::table_bytes(level) as u64;
        let with_shadow = if Self::has_shadow(level) { 2 * t } else { t };
        with_shadow.max(self.mem.granule())
    }

    /// The table page at `pa` of `level`.
    #[inline]
    pub(crate) fn table(&self, pa: PhysAddr, level: usize) -> TableRef {
        TableRef::of::<L>(self.mem.phys_to_ptr(pa), level)
    }

    /// Word 0 of the unlinked table page `pa`, which links the page into a
    /// list (the stock, a map's reserve) while no walk can reach it. It is
    /// accessed as an atomic like every table word, so the page's memory is
    /// only ever seen one way (and is loom's under `cfg(kmm_loom)`).
    #[inline]
    pub(crate) fn link_word(&self, pa: PhysAddr) -> TableRef {
        TableRef::new(self.mem.phys_to_ptr(pa), 1, false)
    }

    /// Whether a live count may be changed by a [`LeafPath`](crate::LeafPath)
    /// meanwhile, so the walker must change it by atomic read-modify-write
    /// (see [`TableRef::adjust_live`]).
    #[inline]
    pub(crate) fn counts_shared(&self) -> bool {
        // Broken variant (loom_leaf_path_broken): the locked walker keeps
        // its plain load-and-store delta although a `LeafPath` exists, so
        // an unlocked map or zap of another page of the same table between
        // the load and the store is lost from the count.
        #[cfg(kmm_loom)]
        if crate::loom_mutation::MUTATION.active(crate::loom_mutation::PLAIN_LOCKED_DELTA) {
            return false;
        }
        self.tables_pinned
    }

    /// A zeroed table page (with its shadow) for `level`: from the stock if
    /// it has one, else from the frame source, zeroed here.
    pub(crate) fn alloc_table(&mut self, level: usize) -> Result<PhysAddr, FrameError> {
        let bytes = self.alloc_bytes(level);
        let pa = match self.stock_take(level) {
            Some(pa) => {
                self.stats.tables_from_stock += 1;
                pa
            }
            None => {
                let pa = self.mem.alloc(bytes, bytes)?;
                self.zero_fresh(pa, bytes);
                pa
            }
        };
        self.tables_in_use += 1;
        self.table_bytes_in_use += bytes;
        self.stats.tables_allocated += 1;
        Ok(pa)
    }

    /// Zeroes the `bytes` bytes just allocated at `pa` (frames are not
    /// zeroed by the source).
    #[cfg(not(kmm_loom))]
    fn zero_fresh(&self, pa: PhysAddr, bytes: u64) {
        let p = self.mem.phys_to_ptr(pa);
        // SAFETY: the source just handed out `bytes` bytes at `pa`,
        // reachable through `p`; nothing else uses them yet (the page is not
        // linked), so a plain write is fine.
        unsafe { p.write_bytes(0, bytes as usize) };
    }

    /// Zeroes the words just allocated at `pa`. Under loom table memory is
    /// loom atomics, which a byte write would destroy: store each word.
    #[cfg(kmm_loom)]
    fn zero_fresh(&self, pa: PhysAddr, bytes: u64) {
        let words = (bytes / 8) as usize;
        let t = TableRef::new(self.mem.phys_to_ptr(pa), words, false);
        for i in 0..words {
            t.entry(i).store(0, Ordering::Relaxed);
        }
    }

    /// Returns an unlinked (and, after a zap, flushed) all-zero table page:
    /// to the stock while it has room, else to the frame source.
    pub(crate) fn release_table(&mut self, pa: PhysAddr, level: usize) -> Result<(), FrameError> {
        let bytes = self.alloc_bytes(level);
        if let Err(pa) = self.stock_put(pa, level) {
            self.mem.free(pa, bytes)?;
        }
        self.tables_in_use -= 1;
        self.table_bytes_in_use -= bytes;
        self.stats.tables_freed += 1;
        Ok(())
    }

    // ---- addresses ----

    /// Checks a page range `[start, end)` for a map or zap: aligned, not
    /// wrapping, canonical throughout. Canonical sets here are unions of
    /// intervals whose ends fall on root-entry boundaries (the x86_64 hole,
    /// the aarch64 halves), so checking both ends of each root entry's piece
    /// of the range covers every address in it.
    pub(crate) fn check_range(&self, start: u64, end: u64) -> Result<(), WalkError> {
        let ps = L::PAGE_SIZE;
        if start % ps != 0 {
            return Err(WalkError::Unaligned {
                addr: VirtAddr::new(start),
            });
        }
        if end % ps != 0 {
            return Err(WalkError::Unaligned {
                addr: VirtAddr::new(end),
            });
        }
        if end < start {
            return Err(WalkError::Wraps {
                start: VirtAddr::new(start),
            });
        }
        if end == start {
            return Ok(());
        }
        let canonical = |a: u64| {
            if L::is_canonical(VirtAddr::new(a)) {
                Ok(())
            } else {
                Err(WalkError::NonCanonical {
                    addr: VirtAddr::new(a),
                })
            }
        };
        let span0 = L::entry_span(0);
        let mut a = start;
        loop {
            canonical(a)?;
            let next = match (a & !(span0 - 1)).checked_add(span0) {
                Some(n) if n < end => n,
                _ => break,
            };
            canonical(next - 1)?;
            a = next;
        }
        canonical(end - 1)?;
        if self.half(start) != self.half(end - 1) {
            return Err(WalkError::NonCanonical {
                addr: VirtAddr::new(1 << 63),
            });
        }
        Ok(())
    }

    /// The end of the entry at `level` containing `addr`, clamped to `end`.
    #[inline]
    pub(crate) fn next_boundary(addr: u64, level: usize, end: u64) -> u64 {
        let span = L::entry_span(level);
        match (addr & !(span - 1)).checked_add(span) {
            Some(n) if n < end => n,
            _ => end,
        }
    }

    /// Walks every table and checks that each live count matches the present
    /// entries it counts and that no table is linked at the last level.
    /// O(table pages); for tests and the `debug` configuration.
    pub fn check_consistency(&self) -> Result<(), WalkError> {
        for h in 0..self.n_roots {
            let n = self.count_subtree(self.roots[h], 0, 0)?;
            if n != self.root_live[h] {
                return Err(WalkError::Corrupt {
                    addr: VirtAddr::new(0),
                });
            }
        }
        Ok(())
    }

    /// Present entries of the table at `pa`, checking its children's counts.
    fn count_subtree(&self, pa: PhysAddr, level: usize, base: u64) -> Result<u64, WalkError> {
        let t = self.table(pa, level);
        let mut present = 0;
        for i in 0..t.len {
            let e = L::Entry::from_raw(t.load(i));
            let va = base.wrapping_add((i as u64).wrapping_mul(L::entry_span(level)));
            match e.kind(level) {
                EntryKind::None => continue,
                EntryKind::Table if level + 1 < L::LEVELS => {
                    let n = self.count_subtree(e.addr(), level + 1, va)?;
                    if n != t.live(i) || (n == 0 && self.free_empty_tables) {
                        return Err(WalkError::Corrupt {
                            addr: VirtAddr::new(va),
                        });
                    }
                }
                EntryKind::Table => {
                    return Err(WalkError::Corrupt {
                        addr: VirtAddr::new(va),
                    });
                }
                EntryKind::Leaf => {}
            }
            present += 1;
        }
        Ok(present)
    }

    // ---- teardown ----

    /// Frees every table below `table` and the frames its leaves map
    /// (without any TLB flush: only for `Drop`, with the stock off). Errors
    /// are ignored: a drop cannot report them, and a frame the source
    /// refuses is not ours.
    fn free_subtree(&mut self, pa: PhysAddr, level: usize) {
        let t = self.table(pa, level);
        for i in 0..t.len {
            let e = L::Entry::from_raw(t.load(i));
            match e.kind(level) {
                EntryKind::None => {}
                EntryKind::Table if level + 1 < L::LEVELS => {
                    self.free_subtree(e.addr(), level + 1);
                    let _ = self.release_table(e.addr(), level + 1);
                }
                EntryKind::Table => {}
                EntryKind::Leaf => {
                    if !e.map_flags().contains(MapFlags::DEVICE) {
                        let _ = self.mem.free(e.addr(), L::entry_span(level));
                    }
                }
            }
            t.store(i, 0);
        }
    }
}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Drop for Walker<'_, L, M> {
    fn drop(&mut self) {
        // The teardown does not keep shadow counts zero and flushes nothing,
        // so no table may enter the stock: they go straight back, and so
        // does what the stock holds.
        let _ = self.set_table_stock(0);
        for h in 0..self.n_roots {
            let root = self.roots[h];
            self.free_subtree(root, 0);
            let _ = self.release_table(root, 0);
        }
    }
}
