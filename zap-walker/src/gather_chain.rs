//! The walker's side of a gather's chained batch pages (see `gather.rs`):
//! taking a page from the frame source when the fixed batch is full,
//! writing records into it, and reading them back when the batch is handed
//! on. The pages are the walker's frame source's, so it alone can reach
//! them; their words are accessed as atomics like every table word, so the
//! memory is seen one way only (and is loom's under `cfg(kmm_loom)`).

use crate::gather::{FrameSink, Freed, Gather};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::walker::{TableRef, Walker};
use arch_api::{FrameSource, PageTableLayout, PhysAddr, PhysMap, TlbFlush};

/// Words of one record in a chained page.
const WORDS: usize = 2;

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'_, L, M> {
    /// The chained page at `pa` as words.
    #[inline(always)]
    fn chain_page(&self, pa: PhysAddr) -> TableRef {
        TableRef::new(self.mem.phys_to_ptr(pa), (self.mem.granule() / 8) as usize)
    }

    /// Queues `f` past the gather's fixed batch, in its last chained page
    /// or a new one; gives it back when the gather may not chain more (off,
    /// the chain full, or the source has no page): the batch must end.
    #[inline(always)]
    pub(crate) fn chain_push<T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        g: &mut Gather<T, N, S>,
        f: Freed,
    ) -> Result<(), Freed> {
        if g.chain_next == g.chain_end && !self.chain_grow(g) {
            return Err(f);
        }
        let [a, b] = f.to_words();
        // SAFETY: `chain_words` is the start of the last chained page
        // (`chain_grow` set it from the page's `PhysMap` pointer; the page
        // is the gather's until `chain_drain` frees it), which holds
        // `chain_end` records of `WORDS` words, and `chain_next <
        // chain_end` here (checked, or 0 on a page just taken). Only the
        // walker touches those words, always as atomics.
        unsafe {
            let at = g.chain_words.add(g.chain_next * WORDS);
            (*at).store(a, Ordering::Relaxed);
            (*at.add(1)).store(b, Ordering::Relaxed);
        }
        g.chain_next += 1;
        Ok(())
    }

    /// Chains one more page; whether it could.
    #[cold]
    #[inline(never)]
    fn chain_grow<T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        g: &mut Gather<T, N, S>,
    ) -> bool {
        let granule = self.mem.granule();
        let per_page = (granule / 8) as usize / WORDS;
        if g.chain.len() >= g.chain_max || per_page == 0 {
            return false;
        }
        let Ok(pa) = self.mem.alloc(granule, granule) else {
            return false; // no page: the batch ends here instead
        };
        g.chain.push(pa);
        g.chain_words = self.mem.phys_to_ptr(pa) as *const AtomicU64;
        g.chain_next = 0;
        g.chain_end = per_page;
        g.stats.chained_pages += 1;
        true
    }

    /// Takes every chained record out of `g`, in the order queued, passing
    /// each to `each`, then returns the pages to the source (a refusal is
    /// remembered for `zap_range` to report).
    pub(crate) fn chain_drain<T: TlbFlush, const N: usize, S: FrameSink>(
        &mut self,
        g: &mut Gather<T, N, S>,
        mut each: impl FnMut(&mut Self, &mut S, Freed),
    ) {
        if g.chain.is_empty() {
            return;
        }
        let granule = self.mem.granule();
        let pages = core::mem::take(&mut g.chain);
        let per_page = g.chain_end;
        for (p, &pa) in pages.iter().enumerate() {
            let page = self.chain_page(pa);
            let n = if p + 1 == pages.len() {
                g.chain_next
            } else {
                per_page
            };
            for i in 0..n {
                let w = [
                    page.load_relaxed(i * WORDS),
                    page.load_relaxed(i * WORDS + 1),
                ];
                each(self, &mut g.sink, Freed::from_words(w));
            }
        }
        for &pa in &pages {
            if let Err(error) = self.mem.free(pa, granule) {
                self.free_error
                    .get_or_insert(crate::errors::WalkError::FreeFailed { frame: pa, error });
            }
        }
        g.chain_words = core::ptr::null();
        g.chain_next = 0;
        g.chain_end = 0;
    }
}
