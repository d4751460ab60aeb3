//! [`LeafPath`]: map, clear and translate base pages inside last-level
//! tables that already exist, from several CPUs at once, without the
//! walker's lock.
//!
//! Why: Linux writes vmalloc PTEs without a global lock. Each virtual range
//! belongs to exactly one area (one caller at a time), and kernel page
//! tables are never freed, so two CPUs working on different areas only ever
//! race on populating a missing table, which stays serialised. A
//! [`Walker`] behind its owner's lock is that serialised path; a `LeafPath`
//! is the unlocked one, for ranges inside ONE last-level table that exists.
//! Anything else (a missing table, a large leaf, a range across tables)
//! makes it decline with `Ok(false)` / `Ok(None)` before writing anything,
//! and the caller takes the locked path.
//!
//! What makes it sound:
//! * Tables stay: [`Walker::leaf_path`] turns freeing of empty tables off
//!   for good, so a table reached here stays a table of this tree for the
//!   walker's life (large-leaf splits only add tables). The one exception,
//!   [`Walker::free_empty_table`], frees an empty table only for the owner
//!   of every address it translates, so no other user of this path can be
//!   inside it.
//! * Entries are atomics (as everywhere in the walker), read and written
//!   with plain loads and stores: each page has one owner, so no other CPU
//!   writes its entry meanwhile, and a LOCKed compare-exchange or swap per
//!   page would cost more than the rest of the path. A range found not
//!   empty after all is rolled back and declined instead of overwritten.
//! * Nothing but entries: last-level tables keep no live count once a
//!   `LeafPath` exists (see `walker.rs`), so the unlocked path touches no
//!   shared word besides the entries of the pages it owns, and the walker's
//!   side store is its owner's alone.
//! * A table is published zeroed: the walker zeroes a new table before the
//!   release store that links it, and every walk here follows links with
//!   acquire loads, so a page found empty here is empty, not the residue of
//!   the page's previous life.
//!
//! The loom model `tests/loom_leaf_path.rs` runs this path and the locked
//! walker on one last-level table at once, in a table that exists and in
//! one the locked walker links meanwhile (a recycled page with a stale
//! entry at the unlocked owner's slot), and checks translations, counts and
//! tables after. It fails on the broken variant that links tables without
//! release (`tests/loom_leaf_path_broken.rs`): the unlocked owner then reads
//! the stale entry through the new link.
//!
//! The walker's [`WalkStats`](crate::WalkStats) do not count work done here.

use crate::errors::WalkError;
use crate::translate::{Translation, translate_from};
use crate::unflushed::Unflushed;
use crate::walker::{TableRef, Walker};
use arch_api::{
    EntryKind, FrameSource, MapFlags, PageTableEntry, PageTableLayout, PhysAddr, PhysMap, VirtAddr,
};
use core::marker::PhantomData;

/// The unlocked path to the leaves of a [`Walker`]'s existing last-level
/// tables (see the module docs). `Copy`; made by [`Walker::leaf_path`].
pub struct LeafPath<'m, L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> {
    mem: &'m M,
    /// The roots translating the low and the high half (the same one
    /// unless the halves alias, see `walker.rs`).
    roots: [PhysAddr; 2],
    /// The walker's window: first and last address.
    window: [u64; 2],
    _layout: PhantomData<fn() -> L>,
}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Clone for LeafPath<'_, L, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Copy for LeafPath<'_, L, M> {}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> core::fmt::Debug
    for LeafPath<'_, L, M>
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LeafPath")
            .field("layout", &L::NAME)
            .field("roots", &self.roots)
            .field("window", &self.window)
            .finish()
    }
}

// SAFETY: a `LeafPath` is a set of table addresses and `&M`; every access it
// makes to table memory is atomic (`TableRef`), and the tables outlive it by
// the contract of `Walker::leaf_path`. `M: Sync` makes `&M` shareable.
unsafe impl<L: PageTableLayout, M: FrameSource + PhysMap + Sync + ?Sized> Send
    for LeafPath<'_, L, M>
{
}
// SAFETY: as for `Send`.
unsafe impl<L: PageTableLayout, M: FrameSource + PhysMap + Sync + ?Sized> Sync
    for LeafPath<'_, L, M>
{
}

impl<'m, L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'m, L, M> {
    /// The unlocked path to this walker's last-level tables (see
    /// `leaf_path.rs`), or `None` on a one-level layout (no last-level
    /// table has a parent count to share). Turns freeing of empty tables off
    /// for good: [`set_free_empty_tables`](Self::set_free_empty_tables)
    /// cannot turn it back on.
    ///
    /// # Safety
    ///
    /// The returned path (and its copies) must not be used once this walker
    /// is dropped: its tables go back to the frame source then. Concurrent
    /// uses are fine with each other and with this walker's own methods as
    /// long as no two of them work on the same page at once (each range has
    /// one owner at a time, as vmalloc areas do).
    pub unsafe fn leaf_path(&mut self) -> Option<LeafPath<'m, L, M>> {
        if L::LEVELS < 2 {
            return None;
        }
        self.free_empty_tables = false;
        self.tables_pinned = true;
        self.counted_below = L::LEVELS - 1;
        let (first, last) = self.window();
        Some(LeafPath {
            mem: self.mem,
            roots: [
                self.root(VirtAddr::new(0)),
                self.root(VirtAddr::new(1 << 63)),
            ],
            window: [first.as_u64(), last.as_u64()],
            _layout: PhantomData,
        })
    }
}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> LeafPath<'_, L, M> {
    fn table(&self, pa: PhysAddr, level: usize) -> TableRef {
        TableRef::of::<L>(self.mem.phys_to_ptr(pa), level)
    }

    /// The root translating `va`.
    fn root(&self, va: u64) -> PhysAddr {
        self.roots[(va >> 63) as usize]
    }

    /// The last-level table holding `[start, end)`, if the range is page
    /// aligned, canonical, inside the walker's window and inside one
    /// last-level table, and every table above it exists.
    fn leaf_table(&self, start: u64, end: u64) -> Option<TableRef> {
        let ps = L::PAGE_SIZE;
        let last = L::LEVELS - 1;
        let span = L::entry_span(last - 1);
        let (va, tail) = (VirtAddr::new(start), VirtAddr::new(end.wrapping_sub(1)));
        if start % ps != 0
            || end % ps != 0
            || end <= start
            || start / span != (end - 1) / span
            || start < self.window[0]
            || end - 1 > self.window[1]
            || !L::is_canonical(va)
            || !L::is_canonical(tail)
        {
            return None;
        }
        let mut t = self.table(self.root(start), 0);
        for level in 0..last {
            let e = L::Entry::from_raw(t.load(L::index(va, level)));
            match e.kind(level) {
                EntryKind::Table => t = self.table(e.addr(), level + 1),
                EntryKind::Leaf | EntryKind::None => return None,
            }
        }
        Some(t)
    }

    /// Maps `frames` (base pages, in order) at `va` with `flags`, if the
    /// range lies inside one existing last-level table: `Ok(true)`. Declines
    /// with `Ok(false)`, changing nothing, when a table is missing, the
    /// range crosses tables or a page of it is already mapped (the locked
    /// [`Walker::map_range`] then does the work or reports the error).
    #[inline]
    pub fn map(
        &self,
        va: VirtAddr,
        frames: &[PhysAddr],
        flags: MapFlags,
    ) -> Result<bool, WalkError> {
        let ps = L::PAGE_SIZE;
        let start = va.as_u64();
        let Some(end) = (frames.len() as u64)
            .checked_mul(ps)
            .and_then(|b| start.checked_add(b))
        else {
            return Ok(false);
        };
        if let Some(&frame) = frames.iter().find(|f| !f.is_aligned(ps)) {
            return Err(WalkError::UnalignedFrame { frame });
        }
        let Some(leaves) = self.leaf_table(start, end) else {
            return Ok(false);
        };
        let last = L::LEVELS - 1;
        let first = L::index(va, last);
        for (k, f) in frames.iter().enumerate() {
            let leaf = L::Entry::new_leaf(*f, flags, last).raw();
            if !leaves.install(first + k, leaf) {
                // Someone's page is here: undo ours, let the locked path
                // report it.
                for j in 0..k {
                    leaves.take(first + j);
                }
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Clears the base pages of `[start, end)` if the range lies inside one
    /// existing last-level table, listing the frames they mapped in `out`
    /// (MMIO leaves, [`MapFlags::DEVICE`], are cleared but not listed). The
    /// frames are the caller's now, with the flush they are owed: the
    /// returned [`Unflushed`] (no TLB was flushed). Declines with `None`,
    /// changing nothing, when a table is missing, the range crosses tables
    /// or `out` is shorter than the range's pages.
    #[inline]
    pub fn zap(&self, start: VirtAddr, end: VirtAddr, out: &mut [PhysAddr]) -> Option<Unflushed> {
        let (s, e) = (start.as_u64(), end.as_u64());
        let leaves = self.leaf_table(s, e)?;
        let ps = L::PAGE_SIZE;
        let pages = ((e - s) / ps) as usize;
        if out.len() < pages {
            return None;
        }
        let last = L::LEVELS - 1;
        let first = L::index(start, last);
        let mut listed = 0;
        for k in 0..pages {
            let old = L::Entry::from_raw(leaves.take(first + k));
            if old.kind(last) == EntryKind::Leaf && !old.map_flags().contains(MapFlags::DEVICE) {
                out[listed] = old.addr();
                listed += 1;
            }
        }
        Some(Unflushed::new(start, end, listed))
    }

    /// What `va` translates to, as [`Walker::translate`], without the lock.
    pub fn translate(&self, va: VirtAddr) -> Option<Translation> {
        if !L::is_canonical(va) {
            return None;
        }
        translate_from::<L>(self.root(va.as_u64()), va, |pa, level| {
            self.table(pa, level)
        })
    }
}
