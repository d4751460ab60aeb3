//! The `address` policy: Linux before 2005, kept only to reproduce the 24 s
//! `munmap` of an untouched 16 TiB mapping on ia64.
//!
//! `unmap_vmas` cut the range into fixed blocks of `ZAP_BLOCK_SIZE` bytes
//! and walked each from the top of the tree, breaking after every block. An
//! empty upper entry is therefore visited once per block it spans: on an
//! untouched 16 TiB range that is 2^27 descents on ia64 with 16 KiB pages.

use super::{BreakInfo, LockBreak, NoBreak, ZAP_BLOCK_PAGES, ZAP_BLOCK_PAGES_PREEMPT, ZapBudget};

/// Fixed address blocks, one descent from the root and one break each.
#[derive(Clone, Copy, Debug)]
pub struct AddressBudget<H: LockBreak = NoBreak> {
    block: u64,
    page_size: u64,
    hook: H,
}

impl AddressBudget<NoBreak> {
    /// Blocks of 8 pages when `preempt`, 1024 pages otherwise.
    pub fn for_page_size(page_size: u64, preempt: bool) -> Self {
        let pages = if preempt {
            ZAP_BLOCK_PAGES_PREEMPT
        } else {
            ZAP_BLOCK_PAGES
        };
        Self::new(pages.saturating_mul(page_size), page_size)
    }

    /// Blocks of `block` bytes (raised to one page if smaller).
    pub fn new(block: u64, page_size: u64) -> Self {
        Self {
            block: block.max(page_size).max(1),
            page_size: page_size.max(1),
            hook: NoBreak,
        }
    }
}

impl<H: LockBreak> AddressBudget<H> {
    /// The same policy calling `hook` after each block.
    pub fn with_hook<H2: LockBreak>(self, hook: H2) -> AddressBudget<H2> {
        AddressBudget {
            block: self.block,
            page_size: self.page_size,
            hook,
        }
    }

    /// The block size in bytes.
    pub fn block(&self) -> u64 {
        self.block
    }
}

impl<H: LockBreak> ZapBudget for AddressBudget<H> {
    fn name(&self) -> &'static str {
        "address"
    }
    // Units are still charged with the 2005 weights so that reports compare
    // like with like; they decide nothing here.
    fn empty_cost(&self) -> u64 {
        1
    }
    fn page_cost(&self) -> u64 {
        self.page_size
    }
    fn block_end(&self, addr: u64, end: u64) -> u64 {
        // `start + block`, not aligned: the pre-2005 loop did
        // `block = min(zap_block_size, end - start)`.
        addr.saturating_add(self.block).min(end)
    }
    fn charge(&mut self, _units: u64) {}
    fn exhausted(&self) -> bool {
        false
    }
    fn empty_run(&self) -> u64 {
        u64::MAX
    }
    fn break_after_block(&self) -> bool {
        true
    }
    fn lock_break(&mut self, info: &BreakInfo) {
        self.hook.lock_break(info);
    }
}
