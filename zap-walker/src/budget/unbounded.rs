//! The `unbounded` policy: one walk, no breaks (a kernel that cannot or need
//! not reschedule, or tearing down an address space nobody else can use).

use super::{BreakInfo, ZapBudget};

/// Never breaks. Units are charged with the 2005 weights for reports only.
#[derive(Clone, Copy, Debug)]
pub struct Unbounded {
    page_size: u64,
}

impl Unbounded {
    /// For pages of `page_size` bytes (the weight reported per leaf).
    pub fn new(page_size: u64) -> Self {
        Self { page_size }
    }
}

impl ZapBudget for Unbounded {
    fn name(&self) -> &'static str {
        "unbounded"
    }
    fn empty_cost(&self) -> u64 {
        1
    }
    fn page_cost(&self) -> u64 {
        self.page_size
    }
    fn charge(&mut self, _units: u64) {}
    fn exhausted(&self) -> bool {
        false
    }
    fn empty_run(&self) -> u64 {
        u64::MAX
    }
    fn lock_break(&mut self, _info: &BreakInfo) {}
}
