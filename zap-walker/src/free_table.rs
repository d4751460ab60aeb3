//! Giving an empty table back so that a large leaf can take its entry
//! (Linux's `pmd_free_pte_page`, which `vmap_try_huge_pmd` calls).
//!
//! Once tables are pinned ([`Walker::leaf_path`]) a zap never frees a
//! last-level table, so a vmalloc range that once held small areas keeps
//! its empty tables, and [`Walker::map_range_with`] descends into a table
//! it finds rather than replace it: a huge mapping there would get base
//! pages. [`Walker::free_empty_table`] unlinks such a table, has the caller
//! flush, and frees it; the map that follows finds the entry empty.
//!
//! Why it is sound next to the unlocked [`LeafPath`](crate::LeafPath): the
//! caller owns every address the table translates (it is about to map all
//! of them), and a range has one owner at a time, so no `LeafPath` user is
//! inside the table; the walk to it takes the walker's own `&mut`, as every
//! table change does. The MMU may still hold a cached walk through the
//! table (paging-structure caches), hence the flush between the unlink and
//! the free, as `pmd_free_pte_page` flushes before `pte_free_kernel`.

use crate::errors::WalkError;
use crate::walker::Walker;
use arch_api::{EntryKind, FrameSource, PageTableEntry, PageTableLayout, PhysMap, VirtAddr};

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'_, L, M> {
    /// Frees the table at `level` (1 = below the root) that translates the
    /// span starting at `va`, if it is empty and the walker allocated it:
    /// unlinks it, calls `flush(start, end)` with one page of its span
    /// (which must drop cached walks through it, as the gather's flush does:
    /// arm64 `tlbi vae1is`, x86 `invlpg`), then returns it to the table
    /// stock or the frame source. `Ok(true)` if it was freed; `Ok(false)`
    /// if there was nothing to free (no table there, a table with entries, a
    /// table other code linked: those are never freed).
    ///
    /// Call it under the lock that serialises the walker, for a span whose
    /// every address the caller owns (one area), before mapping the span
    /// with a large leaf.
    ///
    /// # Errors
    /// [`WalkError::Unaligned`] if `va` does not start the span of a table
    /// of `level`, [`WalkError::Unsupported`] if `level` is the root's or
    /// past the last; the range errors of
    /// `map_range` if the span is outside the window; `FreeFailed` if the
    /// frame source refuses the page (it is then unlinked and lost to the
    /// walker, as a failed free in a zap).
    pub fn free_empty_table(
        &mut self,
        va: VirtAddr,
        level: usize,
        flush: impl FnOnce(VirtAddr, VirtAddr),
    ) -> Result<bool, WalkError> {
        if level == 0 || level >= L::LEVELS {
            return Err(WalkError::Unsupported);
        }
        let span = L::entry_span(level - 1);
        let base = va.as_u64();
        if base % span != 0 {
            return Err(WalkError::Unaligned { addr: va });
        }
        let end = base
            .checked_add(span)
            .ok_or(WalkError::Wraps { start: va })?;
        self.check_range(base, end)?;
        // Down to the entry that links the table.
        let h = self.half(base);
        let mut t = self.table(self.root(va), 0);
        let mut parent_pa = None;
        for l in 0..level - 1 {
            let e = L::Entry::from_raw(t.load(L::index(va, l)));
            if e.kind(l) != EntryKind::Table {
                return Ok(false);
            }
            parent_pa = Some(e.addr());
            t = self.table(e.addr(), l + 1);
        }
        let pl = level - 1;
        let idx = L::index(va, pl);
        let e = L::Entry::from_raw(t.load(idx));
        if e.kind(pl) != EntryKind::Table {
            return Ok(false);
        }
        let pa = e.addr();
        if !self.is_ours(pa, level, base) || !self.table(pa, level).all_zero() {
            return Ok(false);
        }
        // The parent's count first (it may have to be found or made), so an
        // error leaves the tree as it was.
        let parent = match parent_pa {
            Some(ppa) => Some(self.count_of(ppa, pl, base)?),
            None => None,
        };
        t.swap(idx, L::Entry::EMPTY.raw());
        match parent {
            None => self.root_live[h] -= 1,
            // Emptying an entry leaves the summary as it is (`occupancy.rs`).
            Some(c) if c.n != crate::walker::UNCOUNTED => self.store_count(&c, c.n - 1, c.sum),
            Some(_) => {}
        }
        flush(va, VirtAddr::new(base + L::PAGE_SIZE));
        self.forget(pa);
        self.release_table(pa, level)
            .map_err(|error| WalkError::FreeFailed { frame: pa, error })?;
        Ok(true)
    }
}
