//! What a kernel (and its tests) can ask a vmalloc: the areas
//! (vmallocinfo), the counters, translations, the consistency check; and,
//! under feature `testing`, the test hooks (byte access through the
//! software MMU, the allocation check, the broken purge order).

use super::Vmalloc;
use crate::area::{AreaInfo, AreaKind, AreaState, VmallocStats};
#[cfg(feature = "testing")]
use crate::checker::AllocCheck;
#[cfg(feature = "testing")]
use crate::error::VmallocError;
use crate::lazy::NodeLazy;
use crate::purge::PurgePolicy;
use alloc::vec::Vec;
use arch_api::{PageTableLayout, PhysAddr, Platform, VirtAddr};
use core::sync::atomic::Ordering::Relaxed;
use vmap_core::VmapNodes;
#[cfg(feature = "testing")]
use zap_walker::Translation;

impl<'m, K, P, N> Vmalloc<'m, K, P, N>
where
    K: Platform,
    P: PurgePolicy,
    N: VmapNodes<Lazy = NodeLazy>,
{
    /// `vmap_lazy_nr`: lazily freed pages not yet purged (every node's,
    /// taking each node's lock).
    pub fn vmap_lazy_nr(&self) -> u64 {
        (0..self.nodes.nr_nodes())
            .map(|n| self.nodes.with_lazy(n, |nl| nl.lazy_pages()))
            .sum()
    }

    /// Every area (live and lazy) of every node in address order
    /// (vmallocinfo).
    pub fn areas(&self) -> Vec<AreaInfo> {
        let mut v = Vec::new();
        for n in 0..self.nodes.nr_nodes() {
            self.nodes.with_lazy(n, |nl| v.extend(nl.areas.sorted()));
        }
        v.sort_by_key(|a| a.start);
        v
    }

    /// The counters now.
    pub fn stats(&self) -> VmallocStats {
        let mut s =
            self.counters
                .snapshot(self.nr_cpus, self.vmap_lazy_nr(), self.lazy.underflows());
        for p in &self.per_node {
            s.allocs += p.allocs.load(Relaxed);
            s.frees += p.frees.load(Relaxed);
        }
        // Each live large leaf stands where a last-level table would be.
        let last = K::Layout::LEVELS.saturating_sub(1);
        s.pagetable_bytes_saved = s.huge_leaves * K::Layout::table_bytes(last) as u64;
        s
    }

    /// `vmalloc_to_page`: the physical address `va` maps to now (offset
    /// within the page included), or `None` if nothing maps it. A kernel
    /// reads an area's frames with it (to build a scatter list, to reach a
    /// page through its direct map).
    pub fn vmalloc_to_phys(&self, va: VirtAddr) -> Option<PhysAddr> {
        self.map.translate(va).map(|t| t.phys)
    }

    /// Page-table bytes held (never freed: kernel tables persist).
    pub fn pagetable_bytes(&self) -> u64 {
        self.map.pagetable_bytes()
    }

    /// The root table(s) of vmalloc's page table and how many of the two
    /// slots are used: one, or two on layouts whose halves have separate
    /// roots (aarch64's TTBR0/TTBR1). A kernel whose vmalloc window lives in
    /// fresh tables ([`new`](Self::new)) makes them live (links or loads
    /// them) once, after construction; they never change afterwards.
    pub fn page_table_roots(&self) -> ([PhysAddr; 2], usize) {
        self.map.roots()
    }

    /// Checks the bookkeeping: every area a node records is reserved in the
    /// front at that address; live areas are mapped and lazy ones unmapped;
    /// the lazy pages on the lists are those of the lazy areas.
    pub fn check_consistency(&self) -> Result<(), &'static str> {
        // The broken test order leaves released ranges on the lists.
        #[cfg(feature = "testing")]
        let released = self.test.release_before_flush();
        #[cfg(not(feature = "testing"))]
        let released = false;
        let mut lazy_pages = 0;
        for n in 0..self.nodes.nr_nodes() {
            let (areas, listed) = self
                .nodes
                .with_lazy(n, |nl| (nl.areas.sorted(), nl.lazy_pages()));
            let mut node_lazy = 0;
            for info in &areas {
                let (rs, re) = info.reserved();
                match self.nodes.find(info.start) {
                    Some(a) if a.va_start == rs && a.va_end == re => {}
                    _ => return Err("an area the node records is not reserved in the front"),
                }
                let mapped = self.map.translate(info.start).is_some();
                if info.kind == AreaKind::VmapBlock && info.state == AreaState::Live {
                    continue; // a live block maps only the pages carved from it
                }
                match info.state {
                    AreaState::Live if !mapped => return Err("live area not mapped"),
                    AreaState::Lazy if mapped => return Err("lazy area still mapped"),
                    AreaState::Lazy => node_lazy += info.pages,
                    AreaState::Live => {}
                }
            }
            if listed != node_lazy && !released {
                return Err("a node's lazy list disagrees with its lazy areas");
            }
            lazy_pages += node_lazy;
        }
        if self.lazy.nr() > lazy_pages && !released {
            return Err("vmap_lazy_nr counts pages no lazy area holds");
        }
        Ok(())
    }
}

/// Test-only state of a vmalloc (feature `testing`).
#[cfg(feature = "testing")]
#[derive(Default)]
pub(super) struct TestHooks<'m> {
    check: Option<&'m dyn AllocCheck>,
    release_before_flush: bool,
}

#[cfg(feature = "testing")]
impl TestHooks<'_> {
    #[inline]
    pub(super) fn on_alloc(&self, start: VirtAddr, end: VirtAddr) {
        if let Some(c) = self.check {
            c.on_alloc(start, end);
        }
    }

    #[inline]
    pub(super) fn release_before_flush(&self) -> bool {
        self.release_before_flush
    }
}

/// Test support (feature `testing`; not part of the API).
#[cfg(feature = "testing")]
impl<'m, K, P, N> Vmalloc<'m, K, P, N>
where
    K: Platform,
    P: PurgePolicy,
    N: VmapNodes<Lazy = NodeLazy>,
{
    /// Runs `check` on every range handed out from now on (the stale-TLB
    /// checker).
    #[doc(hidden)]
    pub fn set_alloc_check(&mut self, check: &'m dyn AllocCheck) {
        self.test.check = Some(check);
    }

    /// The deliberately broken order: `vfree` gives the range back before
    /// any flush covers it, so tests can show the stale-TLB checker
    /// catches it.
    #[doc(hidden)]
    pub fn set_release_before_flush(&mut self, on: bool) {
        self.test.release_before_flush = on;
    }

    /// The software MMU: what `va` translates to now.
    #[doc(hidden)]
    pub fn translate(&self, va: VirtAddr) -> Option<Translation> {
        self.map.translate(va)
    }

    /// Writes `byte` at `va` through the page table (the software MMU);
    /// [`VmallocError::GuardPageHit`] on a guard page of a live area (the
    /// fault a kernel would take), [`VmallocError::NotFound`] if `va` is
    /// not mapped writable otherwise.
    ///
    /// A `vmalloc` area's byte is written under its node's lock, not the
    /// page-table lock: `vfree` marks the area lazy under that lock before
    /// it clears the pages (without the page-table lock, `unmap_cached`),
    /// so while the lock is held and the area is live its frames stay
    /// mapped, and writers to the node's areas are serialised. Other kinds
    /// take the page-table lock, as their unmaps do.
    #[doc(hidden)]
    pub fn write_byte(&self, va: VirtAddr, byte: u8) -> Result<(), VmallocError> {
        let not_found = VmallocError::NotFound { addr: va.as_u64() };
        let area = self.nodes.find(va).ok_or(not_found)?;
        let node = self.node_of(area.node);
        let owned = self.nodes.with_lazy(node, |nl| {
            match Self::record_of(nl, area.va_start) {
                Some(i) if i.state == AreaState::Live && i.is_guard(va) => {
                    Some(Err(VmallocError::GuardPageHit {
                        addr: va.as_u64(),
                        area: i.start.as_u64(),
                    }))
                }
                Some(i) if i.state == AreaState::Live && i.kind == AreaKind::Vmalloc => {
                    // SAFETY: `va` lies in the mapped part of this live
                    // vmalloc area (`find` returns the area containing it,
                    // and it is no guard page); its `vfree` must take this
                    // node lock, held until the write is done, and so must
                    // every other write to the node's vmalloc areas.
                    Some(unsafe { self.map.write_byte_owned(va, byte) })
                }
                Some(i) if i.state == AreaState::Live => None,
                _ => Some(Err(not_found)),
            }
        });
        match owned {
            Some(r) => r,
            None => self.map.write_byte(va, byte),
        }
    }

    /// The record of the front's area starting at `reserved`: keyed by its
    /// first mapped byte, one page in for a stack.
    fn record_of(nl: &NodeLazy, reserved: VirtAddr) -> Option<&AreaInfo> {
        let key = reserved.as_u64();
        nl.areas.get(key).or_else(|| {
            nl.areas
                .get(key + K::Layout::PAGE_SIZE)
                .filter(|i| i.reserved().0 == reserved)
        })
    }

    /// The guard-page hit of an access at `va` that found nothing mapped,
    /// if `va` is a guard page of a live area.
    fn guard_hit(&self, va: VirtAddr) -> Option<VmallocError> {
        let area = self.nodes.find(va)?;
        let node = self.node_of(area.node);
        self.nodes.with_lazy(node, |nl| {
            let i = Self::record_of(nl, area.va_start)?;
            (i.state == AreaState::Live && i.is_guard(va)).then_some(VmallocError::GuardPageHit {
                addr: va.as_u64(),
                area: i.start.as_u64(),
            })
        })
    }

    /// [`write_byte`](Self::write_byte) without finding the area: the
    /// caller vouches for it, so the cost is one translation (the vmalloc
    /// loop's touch).
    ///
    /// # Safety
    ///
    /// `va` lies in a live `vmalloc` area of this vmalloc that no thread
    /// frees until this returns, and no other thread accesses that byte
    /// meanwhile.
    #[doc(hidden)]
    pub unsafe fn write_byte_owned(&self, va: VirtAddr, byte: u8) -> Result<(), VmallocError> {
        // SAFETY: the caller's contract is `Mapper::write_byte_owned`'s.
        unsafe { self.map.write_byte_owned(va, byte) }
    }

    /// Reads the byte at `va` through the page table; a guard page of a
    /// live area is [`VmallocError::GuardPageHit`].
    #[doc(hidden)]
    pub fn read_byte(&self, va: VirtAddr) -> Result<u8, VmallocError> {
        self.map
            .read_byte(va)
            .map_err(|e| self.guard_hit(va).unwrap_or(e))
    }
}
