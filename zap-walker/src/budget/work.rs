//! The `work` policy: the 2005 fix (Linux `unmap_vmas` with `zap_work`).

use super::{BreakInfo, LockBreak, NoBreak, ZAP_BLOCK_PAGES, ZAP_BLOCK_PAGES_PREEMPT, ZapBudget};

/// Counts abstract work: an empty entry at any level costs `empty_cost`
/// (1), a cleared leaf `page_cost` (`PAGE_SIZE`), against a budget of
/// `ZAP_BLOCK_SIZE` (8 pages' worth under preemption, 1024 otherwise). When
/// the budget is spent the walker breaks; between two breaks at most
/// `budget + page_cost - 1` units are done (the check follows each charge).
#[derive(Clone, Copy, Debug)]
pub struct WorkBudget<H: LockBreak = NoBreak> {
    budget: u64,
    empty_cost: u64,
    page_cost: u64,
    spent: u64,
    hook: H,
}

impl WorkBudget<NoBreak> {
    /// The 2005 weights for pages of `page_size` bytes: empty entry 1, page
    /// `page_size`, budget `ZAP_BLOCK_SIZE` = 8 pages' worth when `preempt`,
    /// 1024 pages' worth otherwise.
    pub fn for_page_size(page_size: u64, preempt: bool) -> Self {
        let pages = if preempt {
            ZAP_BLOCK_PAGES_PREEMPT
        } else {
            ZAP_BLOCK_PAGES
        };
        Self::new(pages.saturating_mul(page_size), 1, page_size)
    }

    /// Any weights. A zero budget or weight is raised to 1 so the walk
    /// always makes progress between breaks.
    pub fn new(budget: u64, empty_cost: u64, page_cost: u64) -> Self {
        Self {
            budget: budget.max(1),
            empty_cost: empty_cost.max(1),
            page_cost: page_cost.max(1),
            spent: 0,
            hook: NoBreak,
        }
    }
}

impl<H: LockBreak> WorkBudget<H> {
    /// The same budget calling `hook` at each break.
    pub fn with_hook<H2: LockBreak>(self, hook: H2) -> WorkBudget<H2> {
        WorkBudget {
            budget: self.budget,
            empty_cost: self.empty_cost,
            page_cost: self.page_cost,
            spent: 0,
            hook,
        }
    }

    /// The budget in units (`ZAP_BLOCK_SIZE`).
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// The hook, mutably.
    pub fn hook_mut(&mut self) -> &mut H {
        &mut self.hook
    }
}

impl<H: LockBreak> ZapBudget for WorkBudget<H> {
    fn name(&self) -> &'static str {
        "work"
    }
    fn empty_cost(&self) -> u64 {
        self.empty_cost
    }
    fn page_cost(&self) -> u64 {
        self.page_cost
    }
    fn charge(&mut self, units: u64) {
        self.spent = self.spent.saturating_add(units);
    }
    fn exhausted(&self) -> bool {
        self.spent >= self.budget
    }
    fn empty_run(&self) -> u64 {
        // Charged one by one, the walk would stop after the entry that
        // reaches the budget: ceil(left / cost) entries (at least one).
        let left = self.budget.saturating_sub(self.spent);
        // No division in the common configuration (an empty entry is 1).
        let n = if self.empty_cost == 1 {
            left
        } else {
            left.div_ceil(self.empty_cost)
        };
        n.max(1)
    }
    fn lock_break(&mut self, info: &BreakInfo) {
        self.hook.lock_break(info);
        self.spent = 0;
    }
}
