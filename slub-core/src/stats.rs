//! SLUB_STATS-like counters (feature `stats`) and the slabinfo-like dump
//! (always available; it is computed from the slab counts, not counters).
//!
//! Counters are per CPU and bumped with a relaxed load + store (no atomic
//! read-modify-write on the fast path); with the migrating backend two tasks
//! on one slot can lose an increment, so treat them as statistics. The two
//! fast-path counters can be left out per cache
//! ([`CacheConfig::fast_path_stats`](crate::CacheConfig::fast_path_stats)). They are
//! read with [`KmemCache::stats`](crate::KmemCache::stats) and the dump with
//! [`KmemCache::slabinfo`](crate::KmemCache::slabinfo).

use core::fmt;

macro_rules! items {
    ($($(#[$m:meta])* $v:ident = $n:literal,)*) => {
        /// One SLUB_STATS counter (read with
        /// [`KmemCache::stats`](crate::KmemCache::stats) under feature
        /// `stats`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum StatItem { $($(#[$m])* $v,)* }
        #[cfg(feature = "stats")]
        impl StatItem {
            /// Every counter, in order.
            pub const ALL: &'static [StatItem] = &[$(StatItem::$v,)*];
            /// Linux's name for it (`/sys/kernel/slab/*/` file).
            pub const fn name(self) -> &'static str {
                match self { $(StatItem::$v => $n,)* }
            }
        }
    };
}

items! {
    /// Allocation served by the lockless path (or the main sheaf).
    AllocFastpath = "alloc_fastpath",
    /// Allocation that needed the slow path.
    AllocSlowpath = "alloc_slowpath",
    /// Slow path refilled from remote frees on the CPU slab.
    AllocRefill = "alloc_refill",
    /// Free to the CPU freelist (or the main sheaf, or the CPU's detached
    /// freelist).
    FreeFastpath = "free_fastpath",
    /// Free to a slab's own freelist.
    FreeSlowpath = "free_slowpath",
    /// Free to a slab frozen by a CPU (a remote free).
    FreeRemote = "free_remote",
    /// A free made a full slab partial again.
    FreeAddPartial = "free_add_partial",
    /// CPU slab taken from the node partial list.
    AllocFromPartial = "alloc_from_partial",
    /// CPU slab taken from the CPU partial list.
    CpuPartialAlloc = "cpu_partial_alloc",
    /// A free froze a full slab onto the CPU partial list.
    CpuPartialFree = "cpu_partial_free",
    /// The CPU partial list was full and went to the node list.
    CpuPartialDrain = "cpu_partial_drain",
    /// New slab from the page source.
    AllocSlab = "alloc_slab",
    /// Slab returned to the page source.
    FreeSlab = "free_slab",
    /// A CPU slab flushed.
    CpuslabFlush = "cpuslab_flush",
    /// Deactivated slab was full (left off-list).
    DeactivateFull = "deactivate_full",
    /// Deactivated slab was empty and freed.
    DeactivateEmpty = "deactivate_empty",
    /// Deactivated slab went to the node partial list.
    DeactivateToPartial = "deactivate_to_head",
    /// Per-CPU DW-CAS failed (retry).
    CmpxchgDoubleCpuFail = "cmpxchg_double_cpu_fail",
    /// Slab-level DW-CAS failed (retry).
    CmpxchgDoubleFail = "cmpxchg_double_fail",
    /// Main sheaf refilled from slabs.
    SheafRefill = "sheaf_refill",
    /// Main sheaf flushed to slabs.
    SheafFlush = "sheaf_flush",
    /// Full sheaf taken from the barn.
    BarnGet = "barn_get",
    /// Full sheaf put into the barn.
    BarnPut = "barn_put",
    /// Object added to a CPU's batch of deferred frees (`kfree_rcu` to the
    /// `rcu_free` sheaf).
    FreeRcuSheaf = "free_rcu_sheaf",
}

/// Number of counters.
#[cfg(feature = "stats")]
pub const NR_STATS: usize = StatItem::ALL.len();

/// One CPU's counters (a line of the slab layer's per-CPU array; aligned
/// so that CPUs do not share a cache line).
#[cfg(feature = "stats")]
#[repr(align(64))]
pub(crate) struct CpuStats([core::sync::atomic::AtomicU64; NR_STATS]);

#[cfg(feature = "stats")]
impl CpuStats {
    pub(crate) fn new() -> Self {
        Self([const { core::sync::atomic::AtomicU64::new(0) }; NR_STATS])
    }

    #[inline(always)]
    pub(crate) fn inc(&self, item: StatItem) {
        use core::sync::atomic::Ordering::Relaxed;
        let c = &self.0[item as usize];
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// Adds this CPU's counts to `counts`.
    pub(crate) fn add_to(&self, counts: &mut [u64; NR_STATS]) {
        for (sum, c) in counts.iter_mut().zip(&self.0) {
            *sum += c.load(core::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[cfg(feature = "stats")]
impl StatItem {
    /// `alloc_fastpath` or `free_fastpath`: counted only when the cache's
    /// [`CacheConfig::fast_path_stats`](crate::CacheConfig::fast_path_stats)
    /// says so.
    #[inline(always)]
    pub(crate) const fn is_fast_path(self) -> bool {
        matches!(self, StatItem::AllocFastpath | StatItem::FreeFastpath)
    }
}

/// A snapshot of every counter, summed over CPUs.
#[cfg(feature = "stats")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheStats {
    counts: [u64; NR_STATS],
}

#[cfg(feature = "stats")]
impl CacheStats {
    pub(crate) fn from_counts(counts: [u64; NR_STATS]) -> Self {
        Self { counts }
    }

    /// One counter.
    pub fn get(&self, item: StatItem) -> u64 {
        self.counts[item as usize]
    }

    /// `(name, value)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        StatItem::ALL.iter().map(|&i| (i.name(), self.get(i)))
    }
}

/// One line of `/proc/slabinfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabInfo {
    /// Cache name.
    pub name: &'static str,
    /// Objects in use (including those cached on CPU freelists and sheaves).
    pub active_objs: usize,
    /// Objects in all slabs.
    pub num_objs: usize,
    /// Object stride in bytes.
    pub objsize: usize,
    /// Objects per slab.
    pub objperslab: usize,
    /// Pages per slab.
    pub pagesperslab: usize,
    /// Slabs with at least one object in use (all but empty partial ones).
    pub active_slabs: usize,
    /// Slabs held.
    pub num_slabs: usize,
    /// Slabs on the node partial list.
    pub partial_slabs: usize,
}

impl SlabInfo {
    /// The header lines of `/proc/slabinfo` (version 2.1).
    pub const HEADER: &'static str = "slabinfo - version: 2.1\n# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>";
}

impl fmt::Display for SlabInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<17} {:>6} {:>6} {:>6} {:>4} {:>4} : tunables {:>4} {:>4} {:>4} : slabdata {:>6} {:>6} {:>6}",
            self.name,
            self.active_objs,
            self.num_objs,
            self.objsize,
            self.objperslab,
            self.pagesperslab,
            0,
            0,
            0,
            self.active_slabs,
            self.num_slabs,
            0
        )
    }
}
