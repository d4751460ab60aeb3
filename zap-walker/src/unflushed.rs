//! [`Unflushed`]: the flush a caller owes after clearing entries without one.

use arch_api::{TlbFlush, VirtAddr};

/// Entries cleared without a TLB flush ([`LeafPath::zap`](crate::LeafPath::zap)):
/// the frames they mapped are the caller's now, but any CPU may still
/// translate the range until it is flushed, so they must not be reused
/// before. Discharge it with [`flush`](Self::flush), or take the obligation
/// over explicitly with [`defer`](Self::defer) (vmalloc's lazy purge flushes
/// freed ranges later, in one batch).
#[must_use = "the range may still be cached in TLBs: flush it, or `defer` the flush, before its frames are reused"]
#[derive(Debug, PartialEq, Eq)]
pub struct Unflushed {
    start: VirtAddr,
    end: VirtAddr,
    frames: usize,
}

impl Unflushed {
    pub(crate) fn new(start: VirtAddr, end: VirtAddr, frames: usize) -> Self {
        Unflushed { start, end, frames }
    }

    /// Frames listed (leaves mapped with `MapFlags::DEVICE` are cleared
    /// but not listed: MMIO is nobody's frame).
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The range cleared, `[start, end)`.
    pub fn range(&self) -> (VirtAddr, VirtAddr) {
        (self.start, self.end)
    }

    /// Flushes the range through `tlb` (pages of `page_size` bytes): the
    /// frames may be reused once this returns.
    pub fn flush<T: TlbFlush + ?Sized>(self, tlb: &T, page_size: u64) {
        tlb.flush_range(self.start, self.end, page_size);
    }

    /// Takes the flush over: the caller promises to flush `[start, end)`
    /// (returned) before the frames are reused.
    pub fn defer(self) -> (VirtAddr, VirtAddr) {
        (self.start, self.end)
    }
}
