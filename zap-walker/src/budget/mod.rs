//! The `ZapBudget` seam: how unmap work is counted and when the walker stops
//! to let the OS reschedule.
//!
//! The history (2005): Linux unmapped in fixed address blocks of
//! `ZAP_BLOCK_SIZE` and re-descended from the top for every block, so an
//! untouched 16 TiB mapping took 24 s on ia64. The fix counted work instead:
//! an empty entry costs 1, a present page costs `PAGE_SIZE` ("a page is worth
//! a thousand words"), and the walk breaks only when that budget is spent.
//! Both are here, behind one trait, so they can be compared side by side:
//!
//! * [`WorkBudget`] (`work.rs`): the 2005 fix, the default.
//! * [`AddressBudget`] (`address.rs`): the pre-2005 fixed address blocks,
//!   re-descending from the root for each; for comparison only.
//! * [`Unbounded`] (`unbounded.rs`): never breaks.
//!
//! The lock break itself is the OS's: a [`LockBreak`] hook (its
//! `cond_resched`, or dropping and retaking the page-table lock) that the
//! walker calls after it has finished the gather, so no freed page is held
//! across the break and no stale TLB entry outlives it; a gather kept open
//! across breaks ([`Gather::across_breaks`](crate::Gather::across_breaks),
//! for a caller that owns the range) is finished there only when it holds
//! a table whose span reaches outside the range.

mod address;
mod unbounded;
mod work;

pub use address::AddressBudget;
pub use unbounded::Unbounded;
pub use work::WorkBudget;

/// `ZAP_BLOCK_SIZE` in pages under preemption (`CONFIG_PREEMPT`): 8 pages.
pub const ZAP_BLOCK_PAGES_PREEMPT: u64 = 8;
/// `ZAP_BLOCK_SIZE` in pages without preemption: 1024 pages.
pub const ZAP_BLOCK_PAGES: u64 = 1024;

/// What the walker tells the hook at a lock break.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BreakInfo {
    /// The address the walk reached; it resumes there after the hook returns.
    pub reached: u64,
    /// Units charged since the previous break (or the start of the zap).
    pub units_since_break: u64,
    /// Entries visited since the previous break.
    pub entries_since_break: u64,
}

/// The OS's lock-break point (`cond_resched`), called with the gather
/// finished: every page cleared so far is flushed from the TLB and freed
/// (unless the gather stays open across breaks: then they wait, held, for
/// a later flush).
pub trait LockBreak {
    /// Reschedule, or drop and retake locks. The walker re-descends from the
    /// root afterwards, so the tables may have changed meanwhile.
    fn lock_break(&mut self, info: &BreakInfo);
}

impl<F: FnMut(&BreakInfo)> LockBreak for F {
    fn lock_break(&mut self, info: &BreakInfo) {
        self(info)
    }
}

/// A hook that does nothing (a kernel without preemption points, or a test).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoBreak;

impl LockBreak for NoBreak {
    fn lock_break(&mut self, _info: &BreakInfo) {}
}

/// How zap work is counted and when to break for a reschedule.
///
/// The walker charges every entry it examines (`empty_cost` for an empty one,
/// `page_cost` for a leaf it clears, nothing for a table it descends into),
/// checks [`exhausted`](Self::exhausted) after each entry at every level, and
/// when it returns true unwinds to the root, finishes the gather and calls
/// [`lock_break`](Self::lock_break). A policy that works in address blocks
/// instead bounds each descent with [`block_end`](Self::block_end).
pub trait ZapBudget {
    /// Name for reports (`work`, `address`, `unbounded`).
    fn name(&self) -> &'static str;
    /// Units an empty entry costs, at any level.
    fn empty_cost(&self) -> u64;
    /// Units a present leaf costs when cleared (a large leaf is one leaf).
    fn page_cost(&self) -> u64;
    /// The end of the next walk from the root, starting at `addr`, for a zap
    /// ending at `end`. The default walks to `end` in one descent.
    fn block_end(&self, addr: u64, end: u64) -> u64 {
        let _ = addr;
        end
    }
    /// Records `units` of work.
    fn charge(&mut self, units: u64);
    /// Whether the walk must stop where it is and break.
    fn exhausted(&self) -> bool;
    /// How many empty entries in a row the walker may charge in one step
    /// (each at [`empty_cost`](Self::empty_cost)) before it must ask
    /// [`exhausted`](Self::exhausted) again: those that fit in the budget
    /// left, the last one possibly reaching it. The default, 1, visits them
    /// one at a time; a budget that never runs out inside a descent answers
    /// `u64::MAX`.
    fn empty_run(&self) -> u64 {
        1
    }
    /// Whether to break after a descent bounded by `block_end` (reached its
    /// end with work left to do). The default breaks only when exhausted.
    fn break_after_block(&self) -> bool {
        self.exhausted()
    }
    /// Calls the OS hook and refills the budget. The gather is finished,
    /// unless it stays open across breaks
    /// ([`Gather::across_breaks`](crate::Gather::across_breaks)): then
    /// what it holds is flushed and freed later, and no entry of the zap's
    /// range may be mapped meanwhile.
    fn lock_break(&mut self, info: &BreakInfo);
}

impl<B: ZapBudget + ?Sized> ZapBudget for &mut B {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn empty_cost(&self) -> u64 {
        (**self).empty_cost()
    }
    fn page_cost(&self) -> u64 {
        (**self).page_cost()
    }
    fn block_end(&self, addr: u64, end: u64) -> u64 {
        (**self).block_end(addr, end)
    }
    fn charge(&mut self, units: u64) {
        (**self).charge(units)
    }
    fn exhausted(&self) -> bool {
        (**self).exhausted()
    }
    fn empty_run(&self) -> u64 {
        (**self).empty_run()
    }
    fn break_after_block(&self) -> bool {
        (**self).break_after_block()
    }
    fn lock_break(&mut self, info: &BreakInfo) {
        (**self).lock_break(info)
    }
}
