//! `vmalloc_huge`: areas mapped with the layout's large leaves
//! (`mapper/huge.rs` maps them and states the frame source contract).
//!
//! Placement: an area of at least one large leaf is aligned to the leaf's
//! size, so that every whole span in it gets a large leaf and only the tail
//! (the size's remainder) is base pages; Linux rounds the size up to a
//! whole leaf instead, this keeps the tail in base pages and gives no
//! memory away. If no aligned range is free, the area is placed as a plain
//! one, with base pages for the head and the tail around the spans that
//! are aligned in it. `vfree` zaps each large leaf as one unit (its run
//! goes back as one range, after the lazy purge's flush, like any frame).

use super::Vmalloc;
use crate::area::AreaKind;
use crate::error::VmallocError;
use crate::flags::VmFlags;
use crate::lazy::NodeLazy;
use crate::mapper::{is_shortage, large_leaf_size};
use crate::purge::PurgePolicy;
use arch_api::{PageTableLayout, Platform, TlbFlush, VirtAddr};
use core::sync::atomic::Ordering::Relaxed;
use vmap_core::VmapNodes;

impl<K, P, N> Vmalloc<'_, K, P, N>
where
    K: Platform,
    P: PurgePolicy,
    N: VmapNodes<Lazy = NodeLazy>,
{
    /// `vmalloc_huge(size)`: as [`vmalloc`](Self::vmalloc), mapped with the
    /// layout's large leaves where they fit ([`VmFlags::HUGE`]): the area is
    /// aligned to a large leaf when it holds one, each whole span is one
    /// large leaf (or base pages when the frame source has no contiguous
    /// run for it), the tail is base pages.
    ///
    /// ```
    /// # use arch_api::{CostModel, HostedCpus, PhysArena, SoftTlb, VirtAddr};
    /// # use vmap_lazy::{LazyMaxPages, OneSpace, Vmalloc, VmallocMem};
    /// # type K<'a> = vmap_lazy::testing::Hosted<'a, arch_x86_64::X86_64Pml4>;
    /// # const PAGE: u64 = 4096;
    /// const HUGE: u64 = 2 << 20;
    /// # let frames = PhysArena::new(16 << 20, PAGE).unwrap();
    /// # let mem = VmallocMem::new(&frames);
    /// # let tlb = SoftTlb::new(2, PAGE, CostModel::FREE);
    /// # let w = OneSpace::<K>::new(VirtAddr::new(0xffff_c900_0000_0000), VirtAddr::new(0xffff_c900_1000_0000), PAGE)?;
    /// # let v: Vmalloc<'_, K> = Vmalloc::new(&mem, w, tlb.on(0), HostedCpus::new(2), LazyMaxPages)?;
    /// let a = v.vmalloc_huge(2 * HUGE + 3 * PAGE)?;
    /// assert_eq!(a.as_u64() % HUGE, 0);
    /// let info = v.areas()[0];
    /// assert_eq!(info.leaves(), ((HUGE, 2), (PAGE, 3))); // two 2 MiB leaves, a 3-page tail
    /// assert_eq!(v.stats().pagetable_bytes_saved, 2 * PAGE); // two last-level tables
    /// v.vfree(a)?; // each large leaf zapped as one unit
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn vmalloc_huge(&self, size: u64) -> Result<VirtAddr, VmallocError> {
        self.vmalloc_with(size, K::Layout::PAGE_SIZE, VmFlags::HUGE, "vmalloc_huge")
    }

    /// The large leaf an area of `pages` pages is mapped with: `None`
    /// when it is smaller than one, or the layout has none (base pages).
    pub(super) fn huge_span(&self, pages: u64) -> Option<u64> {
        large_leaf_size::<K::Layout>().filter(|&s| pages >= s / K::Layout::PAGE_SIZE)
    }

    /// The `HUGE` path of [`vmalloc_with`](Self::vmalloc_with) (blocking)
    /// for an area of at least one large leaf ([`huge_span`](Self::huge_span)).
    /// Kept out of line: small vmallocs should not pay for its code.
    #[cold]
    #[inline(never)]
    pub(super) fn try_vmalloc_huge(
        &self,
        cpu: usize,
        pages: u64,
        align: u64,
        flags: VmFlags,
        caller: &'static str,
    ) -> Result<VirtAddr, VmallocError> {
        let ps = K::Layout::PAGE_SIZE;
        let span = self.huge_span(pages).ok_or(VmallocError::ZeroSize)?;
        // Aligned to the leaf if there is room, else as a plain area. One
        // call site of `reserve` (it is inlined into each).
        let mut area = Err(VmallocError::ZeroSize);
        for a in [align.max(span), align] {
            area = self.reserve(cpu, pages, a, flags);
            match &area {
                Err(e) if is_shortage(e) && a > align => continue,
                _ => break,
            }
        }
        let area = area?;
        let va = Self::mapped_start(&area, flags);
        let flush = |s: u64, e: u64| self.counters.flush(&self.tlb, s, e, ps);
        let got = match self.map.map_new_huge(va, pages, span, flush) {
            Ok(g) => g,
            Err(e) => {
                // Cannot fail: reserved just now and not published.
                let _ = self.nodes.free_area(&area);
                return Err(e);
            }
        };
        self.tlb.sync_new_entries();
        let large = u64::from(got.large);
        self.counters.huge_live.fetch_add(large, Relaxed);
        self.counters.huge_mapped.fetch_add(large, Relaxed);
        self.counters
            .huge_fallbacks
            .fetch_add(u64::from(got.fallbacks), Relaxed);
        let mut info = Self::info(&area, pages, caller, AreaKind::Vmalloc, flags);
        if got.large > 0 {
            info.large_leaves = got.large;
            info.large_shift = span.trailing_zeros() as u8;
        }
        let node = self.node_of(area.node);
        self.nodes.with_lazy(node, |nl| nl.areas.insert(info));
        self.per_node[node].allocs.fetch_add(1, Relaxed);
        Ok(va)
    }
}
