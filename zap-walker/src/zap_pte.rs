//! The last level of a zap (Linux's `zap_pte_range`): the loop that runs
//! once per base page of a dense unmap.
//!
//! The generic level function (`zap.rs`) works for every level, so per entry
//! it computes the entry's boundary, re-derives the index from the address,
//! asks whether a leaf is large, updates the counters in the walker and
//! widens the gather's range. In a last-level table none of that is needed
//! per entry: the entry after `i` is `i + 1` and covers the next page, every
//! present entry is a base-page leaf, and the counters and the range can be
//! kept in registers and written back once. What stays per entry is what the
//! budget and the gather need: the clear (the entry as the MMU left it; a
//! plain store where the MMU has nothing left to set, an exchange
//! otherwise), the charge and the exhaustion check (so the lock-break bound
//! is the same as at any other level), and the frame record.

use crate::budget::ZapBudget;
use crate::errors::WalkError;
use crate::gather::{FrameSink, Freed, FreedKind, Gather};
use crate::walker::{TableRef, Walker};
use arch_api::{
    EntryKind, FrameSource, MapFlags, PageTableEntry, PageTableLayout, PhysMap, TlbFlush, VirtAddr,
};

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'_, L, M> {
    /// Zaps `[addr, end)` inside the last-level table `t` (`end` no further
    /// than the table's span); `live` is `t`'s count of present entries.
    /// Returns the address reached, as `zap_table` does.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn zap_pte_range<B: ZapBudget, T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        t: TableRef,
        mut addr: u64,
        end: u64,
        live: &mut u64,
        budget: &mut B,
        g: &mut Gather<T, N, S>,
    ) -> Result<u64, WalkError> {
        let level = L::LEVELS - 1;
        let ps = L::PAGE_SIZE;
        let (empty_cost, page_cost) = (budget.empty_cost(), budget.page_cost());
        let mut idx = L::index(VirtAddr::new(addr), level);
        // Pages cleared and not yet noted in the gather: `[lo, hi]`.
        let mut lo = u64::MAX;
        let mut hi = 0;
        let (mut visited, mut units, mut cleared) = (0u64, 0u64, 0u64);
        let mut result = Ok(());
        while addr < end {
            let e = L::Entry::from_raw(t.load(idx));
            visited += 1;
            match e.kind(level) {
                EntryKind::None => {
                    units += empty_cost;
                    budget.charge(empty_cost);
                }
                EntryKind::Leaf => {
                    // The entry as the MMU left it (A/D bits).
                    let old = t.clear_leaf(idx, e);
                    *live -= 1;
                    cleared += 1;
                    lo = lo.min(addr);
                    hi = addr + (ps - 1);
                    if !old.map_flags().contains(MapFlags::DEVICE) {
                        let f = Freed {
                            addr: old.addr(),
                            size: ps,
                            kind: FreedKind::Frame,
                        };
                        if let Err(f) = g.push(f) {
                            if let Err(f) = self.chain_push(g, f) {
                                // The batch ends here: its flush covers
                                // every page cleared so far, this one
                                // included, so the frame queued next is
                                // already unreachable when the following
                                // batch frees it.
                                g.note_range(lo, hi);
                                lo = u64::MAX;
                                self.finish_gather(g);
                                // Cannot fail: the batch is empty.
                                let _ = g.push(f);
                            }
                        }
                    }
                    units += page_cost;
                    budget.charge(page_cost);
                }
                EntryKind::Table => {
                    result = Err(WalkError::Corrupt {
                        addr: VirtAddr::new(addr),
                    });
                    break;
                }
            }
            addr += ps;
            idx += 1;
            if *live == 0 {
                addr = end; // nothing left in this table
                break;
            }
            if budget.exhausted() {
                break;
            }
        }
        if lo != u64::MAX {
            g.note_range(lo, hi);
        }
        self.stats.entries_visited += visited;
        #[cfg(feature = "stats")]
        {
            self.stats.visited_per_level[level] += visited;
        }
        self.stats.budget_units += units;
        self.stats.leaves_cleared += cleared;
        result.map(|()| addr)
    }
}
