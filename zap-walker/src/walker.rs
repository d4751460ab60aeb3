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
//! `ptep_get_and_clear`). A leaf whose A/D state is already final
//! ([`PageTableEntry::mmu_settled`]: every mapping this crate makes) is
//! cleared with a plain store instead, since the MMU has nothing left to
//! write into it. Volatile would also stop elision, but it makes no
//! atomicity promise and a volatile access racing with another thread's
//! software walk is a data race. A table pointer is published with a release
//! store after the table was zeroed, and read with an acquire load, so a
//! concurrent software walker never sees the old contents of a recycled page.
//!
//! The atomic type comes from the crate's private loom shim (`sync.rs`):
//! under the family's `--cfg kmm_loom` it is loom's, and table memory must
//! then be loom atomics (see `tests/loom_common`), so one source is both the
//! shipped code and the model.
//!
//! # Live counts, beside the tables
//!
//! Tables are the hardware's and nothing else: one frame of the table size,
//! aligned to it, holding entries. What the walker knows about a table, the
//! number of its present entries inside the walker's window, lives in a side
//! store keyed by the table's frame (`store.rs`: an array indexed by frame
//! number over the frame source's range, a hash for tables outside it;
//! Linux keeps per-table metadata in `struct ptdesc`). The counts let a zap free a table the moment
//! it becomes empty without rescanning it (Linux's `free_pgtables` only frees
//! tables wholly inside the unmapped range; here a partial zap frees them
//! too), and let a walk stop scanning a table whose count reached zero: the
//! rest of it is known to be empty. The root's count is kept in the walker.
//! Beside each count of a table above the last level sits an occupancy
//! summary (`occupancy.rs`: a bit per 1/32 of the table) that lets a zap
//! jump over the empty parts of a sparse table instead of reading them.
//!
//! Once a [`LeafPath`](crate::LeafPath) exists, last-level tables keep no
//! count: the unlocked path maps and clears their entries without touching
//! anything else, a zap never frees a table again and scans the range it was
//! given, and the only way a table goes is
//! [`Walker::free_empty_table`] (for a large leaf, by the owner of its whole
//! span). A last-level table the walker makes from then on is still recorded
//! as its own (no count), so that call can tell it from a table other code
//! linked. Counts of the tables above, which only the walker links, stay.
//!
//! # Attaching to a table the kernel already runs on
//!
//! [`Walker::new`] allocates fresh root(s) and owns the whole tree.
//! [`Walker::attach`] works in a *window* of a root the kernel built, by any
//! code: it scans the window once to count the tables in it, and from then
//! on maps and zaps only inside the window. The contract with the kernel:
//!
//! * Outside the window the kernel may change anything at any time, also
//!   concurrently with walker calls (tables above the window are read with
//!   atomic loads, and the walker writes only entries whose span meets the
//!   window).
//! * Inside the window the walker (and its [`LeafPath`](crate::LeafPath))
//!   is the only writer while a walker call runs. Between two calls other
//!   code may change entries inside the window (link or unlink a table, map
//!   or clear a leaf) only if it calls [`Walker::rescan`] before the next
//!   walker call: the walker's counts of the tables it changed are stale
//!   until then, and a zap trusting a count that is too low would stop
//!   before a present entry. ([`Walker::check_consistency`] finds such a
//!   change.) A table the walker meets without a count, which only a
//!   change it was not told about can produce, is counted then by one scan.
//! * The walker frees only tables it allocated itself and whose whole span
//!   lies inside the window; the root and every table it was given stay.
//!   Dropping an attached walker leaves the tree as it is.
//! * A zap hands every frame it unmaps (but `MapFlags::DEVICE` leaves) to
//!   its gather's [`FrameSink`](crate::FrameSink): the frame source by
//!   default. If the window holds pages other code mapped from memory that
//!   is not the source's, zap them with a sink that knows where they go.
//!
//! # Two roots when the halves alias
//!
//! On aarch64 `TTBR0_EL1` and `TTBR1_EL1` translate the low and high halves
//! with the same index bits, so `0x0000_8000_0000_0000` and
//! `0xffff_8000_0000_0000` would land on the same root entry. The walker
//! detects that from the layout alone (both `0` and `-tree_span` canonical)
//! and keeps one root per half, selected by bit 63. x86_64 sign-extends, so
//! its halves use distinct root entries and it keeps one root (one CR3). An
//! attached walker has the one root it was given (TTBR1's, say): its window
//! lies in that root's half.

use crate::counts::zero_words;
use crate::errors::WalkError;
pub(crate) use crate::live::UNCOUNTED;
use crate::stats::WalkStats;
use crate::stock::TableStock;
use crate::store::SideStore;
use crate::sync::atomic::{AtomicU64, Ordering};
use arch_api::{
    EntryKind, FrameError, FrameSource, MapFlags, PageTableEntry, PageTableLayout, PhysAddr,
    PhysMap, VirtAddr,
};
use core::marker::PhantomData;
use core::ops::Range;

/// The most levels a layout may have (x86_64 LA57 has 5).
pub const MAX_LEVELS: usize = 6;

/// A table page as the walker sees it: its entries, read by the MMU too.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableRef {
    entries: *const AtomicU64,
    len: usize,
}

impl TableRef {
    /// The table whose `len` entries start at `entries`.
    #[inline]
    pub(crate) fn new(entries: *mut u8, len: usize) -> Self {
        TableRef {
            entries: entries as *const AtomicU64,
            len,
        }
    }

    /// The table of layout `L` at `level` whose entries start at `entries`.
    #[inline]
    pub(crate) fn of<L: PageTableLayout>(entries: *mut u8, level: usize) -> Self {
        Self::new(entries, L::entries(level))
    }

    /// Entries in the table.
    #[inline]
    pub(crate) fn len(self) -> usize {
        self.len
    }

    /// Entry `i` as an atomic.
    #[inline]
    fn entry(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < self.len);
        // SAFETY: `entries` points at a live table page of `len` u64 words,
        // 8-byte aligned (tables are aligned to their size; `AtomicU64` has
        // the size and alignment of `u64` where it exists), linked in the
        // tree the walker works in for as long as this reference is used;
        // `i < len` because every index comes from `PageTableLayout::index`,
        // which masks with `entries(level) - 1`. Every access the walker
        // makes to a table is atomic, and so are the MMU's.
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
        #[cfg(kmm_loom)]
        if crate::loom_mutation::MUTATION.active(crate::loom_mutation::RELAXED_LINK) {
            // Broken variant (loom_leaf_path_broken): a table is linked
            // without release, so a reader that follows the link may see the
            // page's contents from before it was zeroed.
            return self.entry(i).store(v, Ordering::Relaxed);
        }
        self.entry(i).store(v, Ordering::Release)
    }

    /// Loads word `i` of a page only the walker reaches (a gather's
    /// chained batch page): no ordering needed.
    #[inline]
    pub(crate) fn load_relaxed(self, i: usize) -> u64 {
        self.entry(i).load(Ordering::Relaxed)
    }

    /// How many of the entries `from..from + max` (clipped to the table)
    /// are `none`, counting from `from` and stopping at the first that is
    /// not. Relaxed loads: nothing behind an empty entry is read.
    #[inline]
    pub(crate) fn empty_run(self, from: usize, max: usize, none: impl Fn(u64) -> bool) -> usize {
        let stop = from.saturating_add(max).min(self.len);
        let mut i = from;
        // Zero entries eight at a time (one OR per entry), where zero is
        // `none` (every layout's empty entry): a sparse table's runs.
        if none(0) {
            while i + 8 <= stop {
                let mut any = 0;
                for k in 0..8 {
                    any |= self.load_relaxed(i + k);
                }
                if any != 0 {
                    break;
                }
                i += 8;
            }
        }
        while i < stop && none(self.load_relaxed(i)) {
            i += 1;
        }
        i - from
    }

    /// Replaces entry `i`, returning the value it had at that instant.
    #[inline]
    pub(crate) fn swap(self, i: usize, v: u64) -> u64 {
        self.entry(i).swap(v, Ordering::AcqRel)
    }

    /// Empties the present leaf `i`, which was just loaded as `seen`, and
    /// returns the entry as it was when it vanished (Linux's
    /// `ptep_get_and_clear`). Only the MMU writes a present leaf behind the
    /// walker's back, and only accessed / dirty state: when `seen` has all of
    /// it ([`PageTableEntry::mmu_settled`]), `seen` is still the entry and a
    /// plain store clears it; otherwise the exchange catches a bit the MMU
    /// sets in between. The exchange is a LOCKed instruction, ~4 ns per page
    /// of a dense unmap on this project's x86 machines.
    #[inline]
    pub(crate) fn clear_leaf<E: PageTableEntry>(self, i: usize, seen: E) -> E {
        if seen.mmu_settled() {
            self.store(i, E::EMPTY.raw());
            seen
        } else {
            E::from_raw(self.swap(i, E::EMPTY.raw()))
        }
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

    /// Whether every entry is zero (`debug` checks).
    #[cfg_attr(not(any(debug_assertions, feature = "debug")), allow(dead_code))]
    pub(crate) fn all_zero(self) -> bool {
        (0..self.len).all(|i| self.load(i) == 0)
    }
}

/// Maps, translates and zaps ranges of one address space of layout `L`,
/// with table pages from `M`.
///
/// Made by [`new`](Self::new) the walker owns its tree: its table pages and
/// the frames mapped through it, which a zap returns to `M` (frames of leaves
/// mapped with [`MapFlags::DEVICE`] excepted: they are MMIO, not memory from
/// the source); dropping it frees everything it still holds without flushing
/// any TLB, so the caller must have stopped using the tables (switched
/// CR3/TTBR away) first. Made by [`attach`](Self::attach) it works in a
/// window of the kernel's own tree and drops without touching it (see the
/// module docs for the contract).
pub struct Walker<'m, L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> {
    pub(crate) mem: &'m M,
    pub(crate) roots: [PhysAddr; 2],
    /// Roots held (1, or 2 when a fresh walker's halves alias).
    pub(crate) n_roots: usize,
    /// Whether the walker allocated its roots (and so the whole tree).
    pub(crate) owns_root: bool,
    /// Present entries of each root inside the window.
    pub(crate) root_live: [u64; 2],
    pub(crate) split_halves: bool,
    /// The window's first and last address (everything for a fresh walker).
    pub(crate) window: [u64; 2],
    /// Counts of the tables below the root (`store.rs`).
    pub(crate) counts: SideStore,
    pub(crate) free_empty_tables: bool,
    /// Set once a [`LeafPath`](crate::LeafPath) exists: no table is freed
    /// again, and last-level tables keep no count.
    pub(crate) tables_pinned: bool,
    /// Levels below this keep live counts: every level, or all but the
    /// last once tables are pinned (see `counted` in `live.rs`).
    pub(crate) counted_below: usize,
    tables_in_use: u64,
    table_bytes_in_use: u64,
    pub(crate) stats: WalkStats,
    /// The first free the source refused during a zap, reported at its end.
    pub(crate) free_error: Option<WalkError>,
    /// Zeroed table pages kept for reuse (`stock.rs`); off unless asked for.
    pub(crate) stock: TableStock,
    /// The first and last address of the zap in progress (a large leaf
    /// ending at or before the last is covered, whatever the budget's
    /// blocks; a table reaching outside them is flushed before a break).
    pub(crate) zap_first: u64,
    pub(crate) zap_last: u64,
    _layout: PhantomData<fn() -> L>,
}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> core::fmt::Debug for Walker<'_, L, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Walker")
            .field("layout", &L::NAME)
            .field("roots", &self.roots())
            .field("window", &self.window())
            .field("tables_in_use", &self.tables_in_use)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<'m, L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'m, L, M> {
    /// A walker with empty root table(s) allocated from `mem`, owning the
    /// whole address space. Freeing tables that become empty is on.
    pub fn new(mem: &'m M) -> Result<Self, WalkError> {
        let mut w = Self::empty(mem)?;
        w.owns_root = true;
        // The counts' array first (a kernel's `struct page` array precedes
        // the pages): allocated later it would sit among the tables that
        // come and go. Without a range or the memory the hash serves.
        let _ = w.counts.reserve_new(mem, 0);
        let want = if w.split_halves { 2 } else { 1 };
        while w.n_roots < want {
            // On failure, dropping `w` frees the roots already allocated.
            w.roots[w.n_roots] = w.alloc_table(0).map_err(WalkError::OutOfTables)?;
            w.n_roots += 1;
        }
        Ok(w)
    }

    /// A walker working in `window` of the tree at `root`, which the kernel
    /// built (by any code) and may be running on. The window is scanned
    /// once to count the tables in it; tables outside it are never written.
    /// Freeing tables that become empty is on, for the tables the walker
    /// allocates in the window.
    ///
    /// Errors: [`WalkError::Unaligned`] if `root` is not aligned to the root
    /// table's size or the window's ends to the page size,
    /// [`WalkError::Wraps`] for an empty or reversed window,
    /// [`WalkError::NonCanonical`] if the window is not canonical or spans
    /// both halves of a layout whose halves have separate roots,
    /// [`WalkError::OutOfTables`] if the frame source cannot hold the counts.
    ///
    /// # Safety
    ///
    /// `root` is a table of layout `L` reachable through `mem`'s
    /// [`PhysMap`], and so is every table linked below it inside the window.
    /// The kernel keeps the contract of the module docs: inside the window
    /// only this walker (and its [`LeafPath`](crate::LeafPath)) writes
    /// entries, but for changes followed by [`rescan`](Self::rescan) before
    /// the next walker call, and the tables the walker relies on stay
    /// linked while it lives.
    pub unsafe fn attach(
        mem: &'m M,
        root: PhysAddr,
        window: Range<VirtAddr>,
    ) -> Result<Self, WalkError> {
        let mut w = Self::empty(mem)?;
        let (start, end) = (window.start.as_u64(), window.end.as_u64());
        if end <= start {
            return Err(WalkError::Wraps {
                start: window.start,
            });
        }
        w.check_range(start, end)?;
        if !root.is_aligned(L::table_bytes(0) as u64) {
            return Err(WalkError::Unaligned {
                addr: VirtAddr::new(root.as_u64()),
            });
        }
        w.roots = [root; 2];
        w.n_roots = 1;
        w.window = [start, end - 1];
        w.rescan()?;
        Ok(w)
    }

    /// A walker with no root yet (a fresh walker's fields).
    fn empty(mem: &'m M) -> Result<Self, WalkError> {
        let granule = mem.granule();
        if L::LEVELS == 0
            || L::LEVELS > MAX_LEVELS
            || !granule.is_power_of_two()
            || granule > L::PAGE_SIZE
            || L::level_shift(0) >= 64
        {
            return Err(WalkError::Unsupported);
        }
        Ok(Walker {
            mem,
            roots: [PhysAddr::new(0); 2],
            n_roots: 0,
            owns_root: false,
            root_live: [0; 2],
            split_halves: Self::halves_alias(),
            window: [0, u64::MAX],
            counts: SideStore::default(),
            free_empty_tables: true,
            tables_pinned: false,
            counted_below: usize::MAX,
            tables_in_use: 0,
            table_bytes_in_use: 0,
            stats: WalkStats::default(),
            free_error: None,
            stock: TableStock::default(),
            zap_first: 0,
            zap_last: 0,
            _layout: PhantomData,
        })
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

    /// Every root: one, or two when a fresh walker's layout has halves that
    /// alias (aarch64: `[TTBR0, TTBR1]`).
    pub fn roots(&self) -> &[PhysAddr] {
        &self.roots[..self.n_roots]
    }

    /// The virtual range the walker maps and zaps in (every address for a
    /// walker made by [`new`](Self::new)), as its first and last address.
    pub fn window(&self) -> (VirtAddr, VirtAddr) {
        (VirtAddr::new(self.window[0]), VirtAddr::new(self.window[1]))
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

    /// Table pages the walker allocated and linked (its roots included;
    /// stocked pages are not in use, see
    /// [`stocked_tables`](Self::stocked_tables); tables it was given by
    /// [`attach`](Self::attach) are not counted).
    pub fn tables_in_use(&self) -> u64 {
        self.tables_in_use
    }

    /// Bytes of page-table memory held: the tables it allocated, the
    /// zeroed-table stock and the side store of live counts (the figure
    /// Linux's 2024 per-node vmap split kept in check: ~132 MB of
    /// page-table pages in its `test_vmalloc` run on 128 CPUs).
    pub fn pagetable_bytes(&self) -> u64 {
        self.table_bytes_in_use + self.stock_bytes() + self.counts.bytes()
    }

    /// Table pages the walker allocated below the root(s): 0 once
    /// everything is unmapped with freeing of empty tables on.
    pub fn tables_below_root(&self) -> u64 {
        let roots = if self.owns_root { self.n_roots } else { 0 };
        self.tables_in_use - roots as u64
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

    /// Bytes allocated for a table at `level`: its size, at least one
    /// granule. Both are powers of two, so this is one too, and the
    /// allocation is aligned to it (tables must be aligned to their size).
    #[inline]
    pub(crate) fn alloc_bytes(&self, level: usize) -> u64 {
        (L::table_bytes(level) as u64).max(self.mem.granule())
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
        TableRef::new(self.mem.phys_to_ptr(pa), 1)
    }

    /// A zeroed table page for `level`: from the stock if it has one, else
    /// from the frame source, zeroed here. Not counted yet.
    pub(crate) fn alloc_table(&mut self, level: usize) -> Result<PhysAddr, FrameError> {
        let bytes = self.alloc_bytes(level);
        let pa = match self.stock_take(level) {
            Some(pa) => {
                self.stats.tables_from_stock += 1;
                pa
            }
            None => {
                let pa = self.mem.alloc(bytes, bytes)?;
                zero_words(self.mem, pa, bytes);
                pa
            }
        };
        self.tables_in_use += 1;
        self.table_bytes_in_use += bytes;
        self.stats.tables_allocated += 1;
        Ok(pa)
    }

    /// Returns an unlinked (and, after a zap, flushed) all-zero table page
    /// the walker allocated: to the stock while it has room, else to the
    /// frame source.
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
    /// wrapping, canonical throughout, inside the window. Canonical sets
    /// here are unions of intervals whose ends fall on root-entry boundaries
    /// (the x86_64 hole, the aarch64 halves), so checking both ends of each
    /// root entry's piece of the range covers every address in it.
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
        if start < self.window[0] || end - 1 > self.window[1] {
            let addr = if start < self.window[0] || start > self.window[1] {
                start
            } else {
                self.window[1] + 1
            };
            return Err(WalkError::OutsideWindow {
                addr: VirtAddr::new(addr),
            });
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

    // ---- teardown ----

    /// Frees every table below `table` and the frames its leaves map
    /// (without any TLB flush: only for `Drop` of a walker that owns its
    /// tree, with the stock off). Errors are ignored: a drop cannot report
    /// them, and a frame the source refuses is not ours.
    fn free_subtree(&mut self, pa: PhysAddr, level: usize) {
        let t = self.table(pa, level);
        for i in 0..t.len() {
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
        // The teardown flushes nothing, so no table may enter the stock:
        // they go straight back, and so does what the stock holds.
        let _ = self.set_table_stock(0);
        if self.owns_root {
            for h in 0..self.n_roots {
                let root = self.roots[h];
                self.free_subtree(root, 0);
                let _ = self.release_table(root, 0);
            }
        }
        let _ = self.counts.release(self.mem);
    }
}
