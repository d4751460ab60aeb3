//! The free side: `vfree` / `vunmap` put an area on its node's lazy list;
//! `purge_vmap_area_lazy` flushes the union of every lazy range once, then
//! gives the ranges back to their nodes.

use super::Vmalloc;
use crate::area::{AreaKind, AreaState, PurgeReport};
use crate::error::VmallocError;
use crate::lazy::{LazyRange, NodeLazy};
use crate::purge::PurgePolicy;
use alloc::vec::Vec;
use arch_api::{PageTableLayout, Platform, VirtAddr};
use core::sync::atomic::Ordering::Relaxed;
use vmap_core::VmapNodes;

impl<K, P, N> Vmalloc<'_, K, P, N>
where
    K: Platform,
    P: PurgePolicy,
    N: VmapNodes<Lazy = NodeLazy>,
{
    /// `vfree(addr)`: unmaps the area at `addr` without a TLB flush, returns
    /// its frames and keeps its range reserved until a purge. A null `addr`
    /// is a no-op; anything but the start of a live `vmalloc` area is an
    /// error that changes nothing.
    pub fn vfree(&self, addr: VirtAddr) -> Result<(), VmallocError> {
        if addr.as_u64() == 0 {
            return Ok(());
        }
        self.free_kind(addr, AreaKind::Vmalloc)
    }

    /// `vunmap(addr)`: as [`vfree`](Self::vfree) for a `vmap` area; the
    /// frames stay the caller's.
    pub fn vunmap(&self, addr: VirtAddr) -> Result<(), VmallocError> {
        if addr.as_u64() == 0 {
            return Ok(());
        }
        self.free_kind(addr, AreaKind::Vmap)
    }

    fn free_kind(&self, addr: VirtAddr, kind: AreaKind) -> Result<(), VmallocError> {
        let not_found = VmallocError::NotFound {
            addr: addr.as_u64(),
        };
        let node = self.nodes.owner(addr).ok_or(not_found)?;
        let node = node % self.nodes.nr_nodes();
        #[cfg(feature = "testing")]
        let release_now = self.test.release_before_flush();
        #[cfg(not(feature = "testing"))]
        let release_now = false;
        // One search of the node's record finds the area and marks it lazy.
        let info = self.nodes.with_lazy(node, |nl| {
            let info = match nl.areas.get_mut(addr.as_u64()) {
                Some(i) if i.state == AreaState::Live => i,
                _ => return Err(not_found),
            };
            if info.kind != kind {
                return Err(VmallocError::WrongKind {
                    addr: addr.as_u64(),
                    kind: info.kind.name(),
                });
            }
            info.state = AreaState::Lazy;
            let copy = *info;
            if release_now {
                nl.areas.remove(addr.as_u64());
            }
            Ok(copy)
        })?;
        let lead = info.flags.guard_pages_before() * K::Layout::PAGE_SIZE;
        if info.large_leaves > 0 {
            let n = u64::from(info.large_leaves);
            self.counters.huge_live.fetch_sub(n, Relaxed);
        }
        if release_now {
            // The deliberately broken order (tests only): the range is free
            // again before any flush.
            let _ = self.nodes.free(VirtAddr::new(info.start.as_u64() - lead));
        }
        let unmapped = if kind == AreaKind::Vmalloc {
            let cache = &self.per_node[node].frames;
            self.map.unmap_cached(cache, info.start, info.end)
        } else {
            self.map.unmap_noflush(info.start, info.end, true)
        };
        self.publish_lazy(
            node,
            LazyRange {
                start: info.start.as_u64(),
                // A shrunk area's spare pages were mapped: flushed with it.
                end: info.end.as_u64() + u64::from(info.spare) * K::Layout::PAGE_SIZE,
                pages: info.pages,
                lead,
                released: release_now,
            },
        );
        unmapped
    }

    /// Publishes `r` on node `node`'s lazy list and counts it, in one
    /// critical section of the node (see `lazy.rs`); then asks the policy.
    pub(super) fn publish_lazy(&self, node: usize, r: LazyRange) {
        let late = self.nodes.with_lazy(node, |nl| nl.publish(r, &self.lazy));
        self.lazy.add_late(late);
        self.per_node[node].frees.fetch_add(1, Relaxed);
        if self.policy.after_free(&self.ctx()) {
            // Not the public purge: the frame caches are for exactly this
            // workload and stay filled.
            self.purge_with(None);
        }
    }

    /// `purge_vmap_area_lazy()`: flushes the TLB once for the union of every
    /// lazy area's range, then releases the ranges for reuse. It also
    /// returns every frame the per-node frame caches hold to the frame
    /// source (a shortage retry purges first, and leak checks count after a
    /// purge); the purges the policy starts from `vfree` leave the caches
    /// alone.
    pub fn purge_vmap_area_lazy(&self) -> PurgeReport {
        self.drain_frame_caches();
        self.purge_with(None)
    }

    /// Returns the frames of every node's frame cache to the source.
    pub(super) fn drain_frame_caches(&self) {
        for p in &self.per_node {
            self.map.drain_cache(&p.frames);
        }
    }

    /// One purge over all nodes: take every lazy list, flush the union of
    /// their ranges and `extra` (vmap-block dirty ranges) once, then give
    /// each range back to its node, and age the front's pools.
    pub(super) fn purge_with(&self, extra: Option<(u64, u64)>) -> PurgeReport {
        let mut taken: Vec<(usize, Vec<LazyRange>)> = Vec::new();
        let (mut start, mut end, mut pages, mut areas) = (u64::MAX, 0, 0, 0u64);
        // What the taken lists had added to the shared counter.
        let mut folded = 0;
        for n in 0..self.nodes.nr_nodes() {
            let (list, f) = self.nodes.with_lazy(n, NodeLazy::take);
            folded += f;
            for r in &list {
                start = start.min(r.start);
                end = end.max(r.end);
                pages += r.pages;
                areas += 1;
            }
            if !list.is_empty() {
                taken.push((n, list));
            }
        }
        if let Some((s, e)) = extra {
            start = start.min(s);
            end = end.max(e);
        }
        if taken.is_empty() && extra.is_none() {
            // Nothing to flush; the pools still age, so that a front whose
            // nodes stopped freeing gives its pooled space back too.
            self.nodes.decay_pools(false);
            return PurgeReport::default();
        }
        self.counters
            .flush(&self.tlb, start, end, K::Layout::PAGE_SIZE);
        for (n, list) in &taken {
            self.nodes.with_lazy(*n, |nl| {
                for r in list.iter().filter(|r| !r.released) {
                    nl.areas.remove(r.start);
                }
            });
            // Cannot fail: a lazy area stays reserved until here.
            self.nodes.free_batch(
                list.iter()
                    .filter(|r| !r.released)
                    .map(|r| VirtAddr::new(r.start - r.lead)),
            );
        }
        if taken.is_empty() {
            return PurgeReport {
                start,
                end,
                ..PurgeReport::default()
            };
        }
        // Linux's decay_va_pool_node: every purge ages the front's pools a
        // quarter, so a node that stopped allocating gives its space back.
        self.nodes.decay_pools(false);
        self.lazy.retire(folded);
        self.counters.purges.fetch_add(1, Relaxed);
        self.counters.areas_purged.fetch_add(areas, Relaxed);
        PurgeReport {
            areas,
            pages,
            start,
            end,
        }
    }
}
