//! `map_range`: installing leaves, allocating the tables they need.
//!
//! A map runs in two passes so that a failure changes nothing: the first
//! walks the range (descending only into tables that exist), rejects any
//! present mapping and counts the tables missing per level; then all of them
//! are allocated (zeroed) into a reserve; only then does the second pass link
//! tables and write leaves, which cannot fail. If the frame source runs dry
//! while filling the reserve, the reserve is returned and nothing was ever
//! visible to the MMU, so no TLB flush is needed to undo it.

use crate::errors::WalkError;
use crate::occupancy::{self, UNKNOWN};
use crate::walker::{MAX_LEVELS, TableRef, UNCOUNTED, Walker};
use arch_api::{
    EntryKind, FrameSource, MapFlags, PageTableEntry, PageTableLayout, PhysAddr, PhysMap, VirtAddr,
};

/// The frames to map, one per page of the range.
#[derive(Clone, Copy, Debug)]
pub enum Frames<'a> {
    /// Page `i` of the range maps `frames[i]`.
    List(&'a [PhysAddr]),
    /// `pages` physically contiguous pages starting at `start`.
    Contiguous {
        /// The first frame.
        start: PhysAddr,
        /// Number of pages.
        pages: u64,
    },
}

impl Frames<'_> {
    /// Pages described.
    pub fn pages(&self) -> u64 {
        match self {
            Frames::List(l) => l.len() as u64,
            Frames::Contiguous { pages, .. } => *pages,
        }
    }

    /// The frame of page `i` (`i < pages()`), for pages of `page_size` bytes.
    #[inline]
    fn frame(&self, i: u64, page_size: u64) -> PhysAddr {
        match self {
            Frames::List(l) => l[i as usize],
            Frames::Contiguous { start, .. } => PhysAddr::new(start.as_u64() + i * page_size),
        }
    }

    /// Whether pages `i .. i + n` are physically contiguous and the first is
    /// aligned to `n * page_size` (what a large leaf needs).
    fn large_ok(&self, i: u64, n: u64, page_size: u64) -> bool {
        let first = self.frame(i, page_size);
        if !first.is_aligned(n * page_size) {
            return false;
        }
        match self {
            Frames::Contiguous { .. } => true,
            Frames::List(l) => l[i as usize..(i + n) as usize]
                .iter()
                .enumerate()
                .all(|(j, f)| f.as_u64() == first.as_u64() + j as u64 * page_size),
        }
    }

    fn check_aligned(&self, page_size: u64) -> Result<(), WalkError> {
        let bad = match self {
            Frames::List(l) => l.iter().find(|f| !f.is_aligned(page_size)).copied(),
            Frames::Contiguous { start, .. } => (!start.is_aligned(page_size)).then_some(*start),
        };
        match bad {
            Some(frame) => Err(WalkError::UnalignedFrame { frame }),
            None => Ok(()),
        }
    }
}

/// Whether `map_range_with` may use large leaves (2 MiB / 1 GiB pages,
/// aarch64 blocks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MapHint {
    /// Base pages only.
    #[default]
    Pages,
    /// A large leaf wherever the layout allows one at that level, the virtual
    /// range covers the whole entry, and the frames under it are contiguous
    /// and aligned to its size.
    LargeLeaves,
}

struct MapCtx<'f> {
    start: u64,
    frames: Frames<'f>,
    flags: MapFlags,
    hint: MapHint,
}

/// Tables allocated ahead of the install pass, chained through their first
/// word (`next | 1`, 0 at the end: tables are aligned, so bit 0 is free).
#[derive(Default)]
struct Reserve {
    heads: [u64; MAX_LEVELS],
}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'_, L, M> {
    /// Maps `frames` at `va`, one frame per page, with base pages. The walker
    /// owns the frames from now on: a zap returns them to the frame source.
    /// On error nothing has changed and the frames are still the caller's.
    pub fn map_range(
        &mut self,
        va: VirtAddr,
        frames: Frames<'_>,
        flags: MapFlags,
    ) -> Result<(), WalkError> {
        self.map_range_with(va, frames, flags, MapHint::Pages)
    }

    /// [`map_range`](Self::map_range) with a hint to use large leaves.
    pub fn map_range_with(
        &mut self,
        va: VirtAddr,
        frames: Frames<'_>,
        flags: MapFlags,
        hint: MapHint,
    ) -> Result<(), WalkError> {
        let ps = L::PAGE_SIZE;
        let start = va.as_u64();
        let pages = frames.pages();
        // `end` is exclusive, so the very last page of the 64-bit space
        // cannot be mapped: its end would be 2^64.
        let end = pages
            .checked_mul(ps)
            .and_then(|len| start.checked_add(len))
            .ok_or(WalkError::Wraps { start: va })?;
        self.check_range(start, end)?;
        if pages == 0 {
            return Ok(());
        }
        frames.check_aligned(ps)?;
        if hint == MapHint::Pages && L::LEVELS >= 2 {
            let leaf_table_span = L::entry_span(L::LEVELS - 2);
            if start / leaf_table_span == (end - 1) / leaf_table_span {
                return self.map_in_leaf_table(start, end, frames, flags);
            }
        }
        let ctx = MapCtx {
            start,
            frames,
            flags,
            hint,
        };
        let root_pa = self.root(va);
        let root = self.table(root_pa, 0);

        // `need[l]`: tables missing at level `l`; `need[0]` (the root is
        // never missing): tables met that are not counted yet.
        let mut need = [0u64; MAX_LEVELS];
        self.plan(0, Some(root), start, end, &ctx, &mut need)?;
        let mut reserve = Reserve::default();
        for (level, &n) in need.iter().enumerate().take(L::LEVELS).skip(1) {
            for _ in 0..n {
                match self.alloc_table(level) {
                    Ok(pa) => self.reserve_push(&mut reserve, level, pa),
                    Err(e) => {
                        self.reserve_drain(&mut reserve);
                        return Err(WalkError::OutOfTables(e));
                    }
                }
            }
        }
        // Room for their counts last: a source that runs dry on the tables
        // leaves the side store as it was. Tables met uncounted were linked
        // by other code, maybe from frames outside the source.
        let new: u64 = need.iter().take(L::LEVELS).skip(1).sum();
        let room = match need[0] {
            0 => Ok(()),
            met => self.reserve_foreign_counts(met as usize),
        };
        if let Err(e) = room.and_then(|()| self.reserve_counts(new as usize)) {
            self.reserve_drain(&mut reserve);
            return Err(WalkError::OutOfTables(e));
        }

        let h = self.half(start);
        let mut live = self.root_live[h];
        // The root keeps no summary.
        let mut sum = UNKNOWN;
        let r = self.install(0, root, start, end, &ctx, &mut reserve, &mut live, &mut sum);
        self.root_live[h] = live;
        // Empty unless the two passes disagreed, which they cannot.
        self.reserve_drain(&mut reserve);
        r
    }

    /// `map_range` of base pages inside one last-level table's span (a
    /// vmalloc of a few pages, a `vm_map_ram`, the sparse 1 TiB map + unmap
    /// cycle of 2005's zap fix):
    /// one descent instead of the plan and install passes. Nothing is
    /// written until every check has passed and every missing table is in
    /// hand; the missing tables are filled and chained while unreachable and
    /// linked last, with one release store, as the install pass does.
    fn map_in_leaf_table(
        &mut self,
        start: u64,
        end: u64,
        frames: Frames<'_>,
        flags: MapFlags,
    ) -> Result<(), WalkError> {
        let last = L::LEVELS - 1;
        let ps = L::PAGE_SIZE;
        let va = VirtAddr::new(start);
        let h = self.half(start);
        let mut t_pa = self.root(va);
        let mut t = self.table(t_pa, 0);
        let mut level = 0;
        // The index in `t` of the entry the new tables hang from (kept
        // from the descent: `L::index` at a level known only at run time
        // loops over the levels).
        let mut t_idx = 0;
        while level < last {
            let idx = L::index(va, level);
            t_idx = idx;
            let e = L::Entry::from_raw(t.load(idx));
            match e.kind(level) {
                EntryKind::Table => {
                    t_pa = e.addr();
                    t = self.table(t_pa, level + 1);
                    level += 1;
                }
                EntryKind::Leaf => return Err(WalkError::AlreadyMapped { addr: va }),
                EntryKind::None => break,
            }
        }
        let pages = (end - start) / ps;
        let first = L::index(va, last);
        if level == last {
            for k in 0..pages as usize {
                let addr = VirtAddr::new(start + k as u64 * ps);
                match L::Entry::from_raw(t.load(first + k)).kind(last) {
                    EntryKind::None => {}
                    EntryKind::Leaf => return Err(WalkError::AlreadyMapped { addr }),
                    EntryKind::Table => return Err(WalkError::Corrupt { addr }),
                }
            }
        }
        // `t`'s count before any write (counting it now if other code
        // linked it), and room for the counts of the tables missing below.
        let missing = last - level;
        let t_count = if level == 0 {
            None
        } else {
            Some(self.count_of(t_pa, level, start)?)
        };
        // The tables missing below `level`, top first, then room for their
        // counts (last, so that a source that runs dry on the tables leaves
        // the side store as it was).
        let mut new = [PhysAddr::new(0); MAX_LEVELS];
        for i in 0..=missing {
            let r = if i < missing {
                self.alloc_table(level + 1 + i).map(|pa| new[i] = pa)
            } else {
                self.reserve_counts(missing)
            };
            if let Err(e) = r {
                for (j, &pa) in new[..i].iter().enumerate() {
                    // Just allocated from this source; if it refuses one
                    // back there is nothing better than to keep counting it.
                    let _ = self.release_table(pa, level + 1 + j);
                }
                return Err(WalkError::OutOfTables(e));
            }
        }
        let leaves = if missing == 0 {
            t
        } else {
            self.table(new[missing - 1], last)
        };
        for k in 0..pages as usize {
            let frame = frames.frame(k as u64, ps);
            leaves.store(first + k, L::Entry::new_leaf(frame, flags, last).raw());
        }
        self.stats.leaves_mapped += pages;
        // What `t` gains: the pages, or the link to the first new table
        // (and its summary bit: `t` is above the last level then).
        let (gained, sum) = if missing == 0 {
            (pages, 0)
        } else {
            (1, occupancy::bit::<L>(level, t_idx))
        };
        match t_count {
            None => self.root_live[h] += gained,
            Some(c) if c.n != UNCOUNTED => self.store_count(&c, c.n + gained, c.sum | sum),
            Some(_) => {}
        }
        if missing == 0 {
            return Ok(());
        }
        // Chain the new tables bottom up while none is reachable: each holds
        // one entry, the next table, whose count is 1 (`pages` for the last,
        // which keeps no summary).
        self.count_new(new[missing - 1], last, pages, 0);
        for i in (0..missing - 1).rev() {
            let l = level + 1 + i;
            let idx = L::index(va, l);
            self.count_new(new[i], l, 1, occupancy::bit::<L>(l, idx));
            let nt = self.table(new[i], l);
            nt.store(idx, L::Entry::new_table(new[i + 1]).raw());
        }
        // Link: the release store publishes the zeroed, filled subtree.
        t.store(t_idx, L::Entry::new_table(new[0]).raw());
        Ok(())
    }

    /// Whether `[a, n)`, one whole entry's range at `level`, gets a leaf
    /// at `level` rather than a table.
    #[inline]
    fn leaf_here(level: usize, a: u64, n: u64, ctx: &MapCtx<'_>) -> bool {
        if level + 1 == L::LEVELS {
            return true;
        }
        if ctx.hint != MapHint::LargeLeaves || !L::leaf_allowed(level) {
            return false;
        }
        let span = L::entry_span(level);
        a % span == 0
            && n - a == span
            && ctx.frames.large_ok(
                (a - ctx.start) / L::PAGE_SIZE,
                span / L::PAGE_SIZE,
                L::PAGE_SIZE,
            )
    }

    /// Pass 1: rejects present mappings in `[addr, end)` and counts missing
    /// tables per level. `table` is `None` inside a subtree that does not
    /// exist yet.
    fn plan(
        &self,
        level: usize,
        table: Option<TableRef>,
        mut addr: u64,
        end: u64,
        ctx: &MapCtx<'_>,
        need: &mut [u64; MAX_LEVELS],
    ) -> Result<(), WalkError> {
        let last = L::LEVELS - 1;
        while addr < end {
            let next = Self::next_boundary(addr, level, end);
            let e = L::Entry::from_raw(
                table.map_or(0, |t| t.load(L::index(VirtAddr::new(addr), level))),
            );
            match e.kind(level) {
                EntryKind::Leaf => {
                    return Err(WalkError::AlreadyMapped {
                        addr: VirtAddr::new(addr),
                    });
                }
                EntryKind::Table if level < last => {
                    if self.counted(level + 1) && self.counts.find(e.addr()).is_none() {
                        need[0] += 1;
                    }
                    let child = self.table(e.addr(), level + 1);
                    self.plan(level + 1, Some(child), addr, next, ctx, need)?;
                }
                EntryKind::Table => {
                    return Err(WalkError::Corrupt {
                        addr: VirtAddr::new(addr),
                    });
                }
                EntryKind::None => {
                    if !Self::leaf_here(level, addr, next, ctx) {
                        need[level + 1] += 1;
                        // A missing last-level table is filled with leaves
                        // only: nothing more to count below it.
                        if level + 1 < last {
                            self.plan(level + 1, None, addr, next, ctx, need)?;
                        }
                    }
                }
            }
            addr = next;
        }
        Ok(())
    }

    /// Pass 2: links tables from the reserve and writes leaves. `live` is the
    /// count of present entries of `t` and `sum` its summary
    /// (`occupancy.rs`), updated as entries are added.
    #[allow(clippy::too_many_arguments)]
    fn install(
        &mut self,
        level: usize,
        t: TableRef,
        mut addr: u64,
        end: u64,
        ctx: &MapCtx<'_>,
        reserve: &mut Reserve,
        live: &mut u64,
        sum: &mut u32,
    ) -> Result<(), WalkError> {
        let ps = L::PAGE_SIZE;
        if level + 1 == L::LEVELS {
            // The hot loop of a dense map: the plan proved every entry empty.
            while addr < end {
                let frame = ctx.frames.frame((addr - ctx.start) / ps, ps);
                let leaf = L::Entry::new_leaf(frame, ctx.flags, level);
                t.store(L::index(VirtAddr::new(addr), level), leaf.raw());
                *live += 1;
                self.stats.leaves_mapped += 1;
                addr += ps;
            }
            return Ok(());
        }
        while addr < end {
            let next = Self::next_boundary(addr, level, end);
            let idx = L::index(VirtAddr::new(addr), level);
            let e = L::Entry::from_raw(t.load(idx));
            match e.kind(level) {
                EntryKind::None if Self::leaf_here(level, addr, next, ctx) => {
                    let frame = ctx.frames.frame((addr - ctx.start) / ps, ps);
                    t.store(idx, L::Entry::new_leaf(frame, ctx.flags, level).raw());
                    *live += 1;
                    *sum |= occupancy::bit::<L>(level, idx);
                    self.stats.leaves_mapped += 1;
                }
                EntryKind::None => {
                    let child_pa =
                        self.reserve_take(reserve, level + 1)
                            .ok_or(WalkError::Corrupt {
                                addr: VirtAddr::new(addr),
                            })?;
                    // Release store: the child was zeroed before it is reachable.
                    t.store(idx, L::Entry::new_table(child_pa).raw());
                    *live += 1;
                    *sum |= occupancy::bit::<L>(level, idx);
                    let (mut child_live, mut child_sum) = (0, 0);
                    let child = self.table(child_pa, level + 1);
                    let r = self.install(
                        level + 1,
                        child,
                        addr,
                        next,
                        ctx,
                        reserve,
                        &mut child_live,
                        &mut child_sum,
                    );
                    self.count_new(child_pa, level + 1, child_live, child_sum);
                    r?;
                }
                EntryKind::Table => {
                    let child_pa = e.addr();
                    // Room for a count met here for the first time was
                    // reserved by the plan.
                    let c = self.count_of(child_pa, level + 1, addr)?;
                    let mut child_live = if c.n == UNCOUNTED { 0 } else { c.n };
                    let mut child_sum = c.sum;
                    let child = self.table(child_pa, level + 1);
                    let r = self.install(
                        level + 1,
                        child,
                        addr,
                        next,
                        ctx,
                        reserve,
                        &mut child_live,
                        &mut child_sum,
                    );
                    self.store_count(&c, child_live, child_sum);
                    r?;
                }
                EntryKind::Leaf => {
                    return Err(WalkError::AlreadyMapped {
                        addr: VirtAddr::new(addr),
                    });
                }
            }
            addr = next;
        }
        Ok(())
    }

    fn reserve_push(&mut self, r: &mut Reserve, level: usize, pa: PhysAddr) {
        // `pa` was just allocated (and zeroed) by `alloc_table` and is not
        // linked anywhere: its first word is free to link the reserve.
        self.link_word(pa).store(0, r.heads[level]);
        r.heads[level] = pa.as_u64() | 1;
    }

    fn reserve_take(&mut self, r: &mut Reserve, level: usize) -> Option<PhysAddr> {
        let head = r.heads[level];
        if head == 0 {
            return None;
        }
        let pa = PhysAddr::new(head & !1);
        // The link word is restored to zero so the table is all zero again.
        let link = self.link_word(pa);
        r.heads[level] = link.load(0);
        link.store(0, 0);
        Some(pa)
    }

    fn reserve_drain(&mut self, r: &mut Reserve) {
        for level in 1..L::LEVELS {
            while let Some(pa) = self.reserve_take(r, level) {
                // A page we just allocated from this source; if it refuses it
                // back there is nothing better to do than keep counting it.
                let _ = self.release_table(pa, level);
            }
        }
    }
}
