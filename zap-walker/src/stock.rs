//! A bounded stock of zeroed table pages (Linux's old page-table
//! `quicklist`s, which ia64 and x86 kept for the same reason).
//!
//! A table page a zap frees is already all zero: it is freed only once its
//! live count reached zero, so every entry was cleared (to
//! [`PageTableEntry::EMPTY`], which is 0). Returning such a page to the frame source and
//! later allocating and zeroing it again for the next map is pure overhead:
//! on ia64-sim a map inside an empty TiB needs up to 9 tables of 16 or 32 KiB
//! each. So, when the caller asks for it ([`Walker::set_table_stock`]), a
//! freed table goes to a per-level stock instead, up to a bound per level, and
//! the next `alloc_table` at that level takes it without touching the frame
//! source and without zeroing it.
//!
//! Only pages that went through the gather (cleared, unlinked, *flushed*)
//! or that were never linked (a failed map's reserve) enter the stock, so a
//! stocked page is unreachable by any MMU or cached walk: the order clear →
//! flush → free still holds, "free" meaning "into the stock".
//!
//! Accounting: stocked pages are not tables in use
//! ([`Walker::tables_in_use`], [`Walker::tables_below_root`] count linked
//! tables only), but they are page-table memory the walker holds, so
//! [`Walker::pagetable_bytes`] includes them and [`Walker::stocked_tables`]
//! counts them. [`Walker::drain_table_stock`] and `Drop` return them to the
//! frame source: nothing stays behind.
//!
//! [`PageTableEntry::EMPTY`]: arch_api::PageTableEntry::EMPTY

use crate::errors::WalkError;
use crate::walker::{MAX_LEVELS, Walker};
use arch_api::{FrameSource, PageTableLayout, PhysAddr, PhysMap};

/// Per-level lists of zeroed table pages, chained through their first word
/// (`next | 1`, 0 at the end: tables are aligned, so bit 0 is free); the
/// word is restored to 0 when a page leaves the list.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TableStock {
    heads: [u64; MAX_LEVELS],
    count: [u64; MAX_LEVELS],
    /// Most pages kept per level; 0 (the default) keeps none.
    max: u64,
    /// Bytes of all stocked pages.
    bytes: u64,
}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'_, L, M> {
    /// Keeps up to `per_level` freed (zeroed) table pages per level for reuse
    /// by later maps instead of returning them to the frame source; 0 (the
    /// default) turns the stock off. Lowering the bound returns the excess
    /// to the frame source at once.
    pub fn set_table_stock(&mut self, per_level: u64) -> Result<(), WalkError> {
        self.stock.max = per_level;
        self.trim_stock(per_level)
    }

    /// The bound set by [`set_table_stock`](Self::set_table_stock).
    pub fn table_stock_limit(&self) -> u64 {
        self.stock.max
    }

    /// Zeroed table pages held in the stock, all levels together.
    pub fn stocked_tables(&self) -> u64 {
        self.stock.count.iter().sum()
    }

    /// Returns every stocked page to the frame source (the bound stays), and
    /// the side store of live counts too when it counts no table (it is
    /// kept otherwise, so that a map after a full unmap does not allocate
    /// it again). The first free the source refuses is reported; the pages
    /// after it are still returned.
    pub fn drain_table_stock(&mut self) -> Result<(), WalkError> {
        let r = self.trim_stock(0);
        if self.counts.is_empty() {
            if let Err((frame, error)) = self.counts.release(self.mem) {
                return r.and(Err(WalkError::FreeFailed { frame, error }));
            }
        }
        r
    }

    pub(crate) fn stock_bytes(&self) -> u64 {
        self.stock.bytes
    }

    /// Frees stocked pages until at most `keep` remain per level.
    fn trim_stock(&mut self, keep: u64) -> Result<(), WalkError> {
        let mut first_err = None;
        for level in 0..L::LEVELS {
            while self.stock.count[level] > keep {
                let Some(pa) = self.stock_take(level) else {
                    break;
                };
                let bytes = self.alloc_bytes(level);
                if let Err(error) = self.mem.free(pa, bytes) {
                    first_err.get_or_insert(WalkError::FreeFailed { frame: pa, error });
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Keeps the unlinked, flushed, all-zero table `pa` of `level` if the
    /// stock has room; gives it back otherwise.
    pub(crate) fn stock_put(&mut self, pa: PhysAddr, level: usize) -> Result<(), PhysAddr> {
        if self.stock.count[level] >= self.stock.max {
            return Err(pa);
        }
        // The page is unlinked and (after a zap) flushed: neither the MMU
        // nor a software walk reaches it, so its first word is free to link.
        self.link_word(pa).store(0, self.stock.heads[level]);
        self.stock.heads[level] = pa.as_u64() | 1;
        self.stock.count[level] += 1;
        self.stock.bytes += self.alloc_bytes(level);
        Ok(())
    }

    /// A stocked, all-zero table page of `level`, if any.
    pub(crate) fn stock_take(&mut self, level: usize) -> Option<PhysAddr> {
        let head = self.stock.heads[level];
        if head == 0 {
            return None;
        }
        let pa = PhysAddr::new(head & !1);
        // Restoring the link word to 0 makes the whole page zero again.
        let link = self.link_word(pa);
        self.stock.heads[level] = link.load(0);
        link.store(0, 0);
        self.stock.count[level] -= 1;
        self.stock.bytes -= self.alloc_bytes(level);
        #[cfg(any(debug_assertions, feature = "debug"))]
        {
            let t = self.table(pa, level);
            assert!(t.all_zero(), "stocked table page {pa:?} is not zero");
        }
        Some(pa)
    }
}
