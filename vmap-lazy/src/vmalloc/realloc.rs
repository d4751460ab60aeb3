//! `vrealloc`: resizing a `vmalloc` area, in place when it can be.
//!
//! Shrinking stays in place: the tail's entries are cleared without a flush
//! and its frames go back, as a `vfree` does, while the tail's range stays
//! reserved in the area (recorded as its `spare` pages, which fault like
//! the guard page) until the area itself is freed and purged: so no range
//! is handed out while a CPU may still translate it. Growing within the
//! last page, into the spare pages, or into free address space after the
//! area ([`VmapNodes::resize`]; the guard page moves to the new end) stays
//! in place too; spare pages are flushed first, since they were mapped
//! before. Otherwise the area moves: a new one, the contents copied, the
//! old one freed. An area with large leaves ([`VmFlags::HUGE`]) always
//! moves (to a new huge area): resizing it in place would split its
//! leaves.
//!
//! [`VmFlags::HUGE`]: crate::VmFlags::HUGE

use super::Vmalloc;
use crate::area::{AreaInfo, AreaKind, AreaState};
use crate::error::VmallocError;
use crate::lazy::NodeLazy;
use crate::mapper::pages_for;
use crate::purge::PurgePolicy;
use arch_api::{PageTableLayout, Platform, TlbFlush, VirtAddr};
use vmap_core::VmapNodes;

impl<K, P, N> Vmalloc<'_, K, P, N>
where
    K: Platform,
    P: PurgePolicy,
    N: VmapNodes<Lazy = NodeLazy>,
{
    /// `vrealloc(addr, size)`: the area at `addr` resized to `size` bytes
    /// (rounded up to pages), its contents kept up to the smaller size; a
    /// null `addr` is a plain [`vmalloc`](Self::vmalloc). Returns where the
    /// area is now (`addr` unless it had to move). Errors change nothing:
    /// [`VmallocError::ZeroSize`], [`VmallocError::Overflow`],
    /// [`VmallocError::NotFound`] (no live area starts at `addr`),
    /// [`VmallocError::WrongKind`] (a `vmap` area), or the shortage of a
    /// move. As for [`vfree`](Self::vfree), nothing else may use the area
    /// meanwhile.
    ///
    /// ```
    /// # use arch_api::{CostModel, HostedCpus, PhysArena, SoftTlb, VirtAddr};
    /// # use vmap_lazy::{LazyMaxPages, OneSpace, Vmalloc, VmallocMem};
    /// # type K<'a> = vmap_lazy::testing::Hosted<'a, arch_x86_64::X86_64Pml4>;
    /// # const PAGE: u64 = 4096;
    /// # let frames = PhysArena::new(1 << 20, PAGE).unwrap();
    /// # let mem = VmallocMem::new(&frames);
    /// # let tlb = SoftTlb::new(2, PAGE, CostModel::FREE);
    /// # let w = OneSpace::<K>::new(VirtAddr::new(0xffff_c900_0000_0000), VirtAddr::new(0xffff_c900_0100_0000), PAGE)?;
    /// # let v: Vmalloc<'_, K> = Vmalloc::new(&mem, w, tlb.on(0), HostedCpus::new(2), LazyMaxPages)?;
    /// let a = v.vmalloc(3 * PAGE)?;
    /// assert_eq!(v.vrealloc(a, PAGE)?, a); // shrunk in place, two pages freed
    /// assert_eq!(v.vrealloc(a, 2 * PAGE)?, a); // grown back into them
    /// assert_eq!(v.vrealloc(a, 4 * PAGE)?, a); // and into the free space after
    /// let next = v.vmalloc(PAGE)?;
    /// let b = v.vrealloc(a, 8 * PAGE)?; // no room after it now: moved
    /// assert_ne!(b, a);
    /// v.vfree(b)?;
    /// v.vfree(next)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn vrealloc(&self, addr: VirtAddr, size: u64) -> Result<VirtAddr, VmallocError> {
        if addr.as_u64() == 0 {
            return self.vmalloc(size);
        }
        let new = pages_for(size, K::Layout::PAGE_SIZE)?;
        let not_found = VmallocError::NotFound {
            addr: addr.as_u64(),
        };
        let node = self.nodes.owner(addr).ok_or(not_found)? % self.nodes.nr_nodes();
        let info = self
            .nodes
            .with_lazy(node, |nl| match nl.areas.get_mut(addr.as_u64()) {
                Some(i) if i.state == AreaState::Live && i.kind == AreaKind::Vmalloc => Ok(*i),
                Some(i) if i.state == AreaState::Live => Err(VmallocError::WrongKind {
                    addr: addr.as_u64(),
                    kind: i.kind.name(),
                }),
                _ => Err(not_found),
            })?;
        if new == info.pages {
            return Ok(addr);
        }
        if info.large_leaves > 0 {
            // In place would split large leaves: a huge area moves.
            return self.realloc_move(addr, &info, size, new.min(info.pages));
        }
        if new < info.pages {
            return self.shrink(node, &info, new).map(|()| addr);
        }
        if self.grow_in_place(node, &info, new).is_ok() {
            return Ok(addr);
        }
        self.realloc_move(addr, &info, size, info.pages)
    }

    /// Moves the area `info` at `addr` to a new one of `size` bytes with
    /// the same flags, copying its first `keep` pages, and frees it.
    fn realloc_move(
        &self,
        addr: VirtAddr,
        info: &AreaInfo,
        size: u64,
        keep: u64,
    ) -> Result<VirtAddr, VmallocError> {
        let b = self.vmalloc_with(size, K::Layout::PAGE_SIZE, info.flags, info.caller)?;
        // SAFETY: `addr` starts a live vmalloc area of at least `keep` pages
        // the caller owns (this call's contract), `b` one of at least `keep`
        // pages made just now and not yet returned to anyone.
        let copied = unsafe { self.map.copy_pages(b, addr, keep) };
        if let Err(e) = copied {
            let _ = self.vfree(b);
            return Err(e);
        }
        self.vfree(addr)?;
        Ok(b)
    }

    /// Unmaps the pages of `info` from page `new` on and keeps their range
    /// as the area's spare pages.
    fn shrink(&self, node: usize, info: &AreaInfo, new: u64) -> Result<(), VmallocError> {
        let ps = K::Layout::PAGE_SIZE;
        let cut = VirtAddr::new(info.start.as_u64() + new * ps);
        let spare = u32::try_from(u64::from(info.spare) + info.pages - new).map_err(|_| {
            VmallocError::Overflow {
                size: info.pages * ps,
            }
        })?;
        // The record first: from here an access to the tail is a guard hit.
        self.nodes.with_lazy(node, |nl| {
            if let Some(i) = nl.areas.get_mut(info.start.as_u64()) {
                i.pages = new;
                i.end = cut;
                i.spare = spare;
            }
        });
        // No flush: the tail's range stays reserved in the area, and the
        // purge after its vfree flushes the spare pages with it.
        self.map.unmap_noflush(cut, info.end, false)
    }

    /// Grows `info` to `new` pages in place: over its spare pages, and past
    /// them if the front can extend the area into the free range after it
    /// (the guard page moves to the new end). On error nothing changed.
    fn grow_in_place(&self, node: usize, info: &AreaInfo, new: u64) -> Result<(), VmallocError> {
        let ps = K::Layout::PAGE_SIZE;
        let add = new - info.pages;
        let spare = u64::from(info.spare);
        let (rs, re) = info.reserved();
        let resized = add > spare;
        if resized {
            let size = new
                .checked_add(info.flags.guard_pages())
                .and_then(|p| p.checked_mul(ps))
                .ok_or(VmallocError::Overflow { size: new })?;
            self.nodes.resize(rs, size).map_err(super::front_error)?;
        }
        let (s, e) = (info.end, VirtAddr::new(info.end.as_u64() + add * ps));
        if spare > 0 {
            // The spare pages were mapped before a shrink cleared them
            // without a flush: a CPU may still translate them to the old
            // frames. The rest was free in the front: flushed by the purge
            // that released it, or never mapped (the old guard page).
            let end = s.as_u64() + add.min(spare) * ps;
            self.counters.flush(&self.tlb, s.as_u64(), end, ps);
        }
        #[cfg(feature = "testing")]
        self.test.on_alloc(s, e);
        if let Err(err) = self.map.map_new_cached(&self.per_node[node].frames, s, add) {
            if resized {
                // Cannot fail: the range was the area's a moment ago.
                let _ = self.nodes.resize(rs, re.as_u64() - rs.as_u64());
            }
            return Err(err);
        }
        self.tlb.sync_new_entries();
        let left = spare.saturating_sub(add) as u32;
        self.nodes.with_lazy(node, |nl| {
            if let Some(i) = nl.areas.get_mut(info.start.as_u64()) {
                i.pages = new;
                i.end = e;
                i.spare = left;
            }
        });
        Ok(())
    }
}
