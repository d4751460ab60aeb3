//! Counters of a walker. They are plain integer increments, cheap enough to
//! keep always on; feature `stats` adds a per-level breakdown.

/// What a walker did: cumulative in [`Walker::stats`](crate::Walker::stats),
/// per call in the value [`Walker::zap_range`](crate::Walker::zap_range) returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkStats {
    /// Entries read and examined, at every level (what made the 2005 ia64
    /// `munmap` of an untouched 16 TiB mapping take 24 s: an empty pgd entry
    /// was revisited 1,073,741,824 times).
    pub entries_visited: u64,
    /// Budget units charged (1 per empty entry, a page's weight per leaf
    /// under the default weights).
    pub budget_units: u64,
    /// Lock breaks taken (gather finished, hook called).
    pub lock_breaks: u64,
    /// The most units charged between two lock breaks (or the start of a zap
    /// and its first break, or the last break and its end).
    pub max_work_between_breaks: u64,
    /// Walks started from the root (one per block, plus one after each break).
    pub descents: u64,
    /// Leaves cleared (a large leaf counts once).
    pub leaves_cleared: u64,
    /// Leaves written by `map_range` (a large leaf counts once).
    pub leaves_mapped: u64,
    /// Table pages allocated (from the frame source or the stock).
    pub tables_allocated: u64,
    /// Table pages freed (returned to the frame source or to the stock).
    pub tables_freed: u64,
    /// Of the tables allocated, how many came from the zeroed-table stock
    /// (`Walker::set_table_stock`) instead of the frame source.
    pub tables_from_stock: u64,
    /// Large leaves split because a zap covered only part of them.
    pub splits: u64,
    /// Entries visited per level, root first (feature `stats`).
    #[cfg(feature = "stats")]
    pub visited_per_level: [u64; crate::MAX_LEVELS],
}

impl WalkStats {
    /// `self - earlier`, field by field (the maximum is kept as is).
    pub fn since(&self, earlier: &WalkStats) -> WalkStats {
        WalkStats {
            entries_visited: self.entries_visited - earlier.entries_visited,
            budget_units: self.budget_units - earlier.budget_units,
            lock_breaks: self.lock_breaks - earlier.lock_breaks,
            max_work_between_breaks: self.max_work_between_breaks,
            descents: self.descents - earlier.descents,
            leaves_cleared: self.leaves_cleared - earlier.leaves_cleared,
            leaves_mapped: self.leaves_mapped - earlier.leaves_mapped,
            tables_allocated: self.tables_allocated - earlier.tables_allocated,
            tables_freed: self.tables_freed - earlier.tables_freed,
            tables_from_stock: self.tables_from_stock - earlier.tables_from_stock,
            splits: self.splits - earlier.splits,
            #[cfg(feature = "stats")]
            visited_per_level: core::array::from_fn(|l| {
                self.visited_per_level[l] - earlier.visited_per_level[l]
            }),
        }
    }
}
