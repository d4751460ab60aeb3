//! `vm_map_ram` / `vm_unmap_ram` over the per-CPU vmap blocks
//! (`vmap_block.rs`), and `vm_unmap_aliases`.

use super::Vmalloc;
use crate::area::{AreaKind, AreaState, PurgeReport};
use crate::error::VmallocError;
use crate::flags::VmFlags;
use crate::lazy::{LazyRange, NodeLazy};
use crate::purge::PurgePolicy;
use crate::vmap_block::{VMAP_BBMAP_BITS, VMAP_MAX_ALLOC};
use alloc::vec::Vec;
use arch_api::{MapFlags, PageTableLayout, PhysAddr, Platform, TlbFlush, VirtAddr};
use vmap_core::VmapNodes;

impl<K, P, N> Vmalloc<'_, K, P, N>
where
    K: Platform,
    P: PurgePolicy,
    N: VmapNodes<Lazy = NodeLazy>,
{
    /// `vm_map_ram(frames)`: up to [`VMAP_MAX_ALLOC`] pages are carved from
    /// the calling CPU's vmap block (no shared-tree search); larger requests
    /// are a plain [`vmap`](Self::vmap). The frames stay the caller's.
    pub fn vm_map_ram(
        &self,
        frames: &[PhysAddr],
        flags: MapFlags,
    ) -> Result<VirtAddr, VmallocError> {
        let n = frames.len() as u64;
        if n > VMAP_MAX_ALLOC {
            return self.vmap(frames, flags);
        }
        self.check_frames(frames)?;
        let ps = K::Layout::PAGE_SIZE;
        let cpu = self.this_cpu();
        self.blocks.map_ram(
            cpu,
            n,
            ps,
            |s, e| self.counters.flush(&self.tlb, s, e, ps),
            || {
                self.with_retry(|| {
                    let area = self.reserve(
                        cpu,
                        VMAP_BBMAP_BITS,
                        VMAP_BBMAP_BITS * ps,
                        VmFlags::NO_GUARD,
                    )?;
                    // A block has no guard: Linux's vmap blocks have none, and
                    // the pages carved from it are the caller's to bound.
                    self.publish(
                        &area,
                        VMAP_BBMAP_BITS,
                        "vmap_block",
                        AreaKind::VmapBlock,
                        VmFlags::NO_GUARD,
                    );
                    Ok(area.va_start.as_u64())
                })
            },
            |va| {
                #[cfg(feature = "testing")]
                self.test.on_alloc(va, VirtAddr::new(va.as_u64() + n * ps));
                self.map.map_frames(va, frames, flags)?;
                self.tlb.sync_new_entries();
                Ok(())
            },
        )
    }

    /// `vm_unmap_ram(addr, count)`: undoes a [`vm_map_ram`](Self::vm_map_ram)
    /// of `count` pages. The entries are cleared without a flush; the pages
    /// are reused once a flush covered them. Anything but a live mapping:
    /// [`VmallocError::NotFound`], nothing changed.
    pub fn vm_unmap_ram(&self, addr: VirtAddr, count: u64) -> Result<(), VmallocError> {
        if count > VMAP_MAX_ALLOC {
            return self.vunmap(addr);
        }
        let (r, retire) = self
            .blocks
            .unmap_ram(addr, count, K::Layout::PAGE_SIZE, |start, end| {
                self.map.unmap_noflush(start, end, true)
            });
        if let Some(block) = retire {
            self.retire_block(block);
        }
        r
    }

    /// A block with every page dirty goes on its node's lazy list as a
    /// whole.
    fn retire_block(&self, start: u64) {
        let Some(node) = self.nodes.owner(VirtAddr::new(start)) else {
            return;
        };
        let node = node % self.nodes.nr_nodes();
        self.nodes.with_lazy(node, |nl| {
            if let Some(info) = nl.areas.get_mut(start) {
                info.state = AreaState::Lazy;
            }
        });
        let end = start + VMAP_BBMAP_BITS * K::Layout::PAGE_SIZE;
        self.publish_lazy(
            node,
            LazyRange {
                start,
                end,
                pages: VMAP_BBMAP_BITS,
                lead: 0,
                released: false,
            },
        );
    }

    /// `vm_unmap_aliases()`: one flush for every node's lazy areas and every
    /// CPU's vmap-block dirty pages; then the lazy ranges are released and
    /// the dirty block pages become reusable. Returns the frame caches'
    /// frames to the source, as
    /// [`purge_vmap_area_lazy`](Self::purge_vmap_area_lazy).
    pub fn vm_unmap_aliases(&self) -> PurgeReport {
        self.drain_frame_caches();
        let mut union: Option<(u64, u64)> = None;
        let mut snaps = Vec::new();
        for (c, m) in self.blocks.cpus.iter().enumerate() {
            let (u, snap) = m.lock().dirty(K::Layout::PAGE_SIZE);
            if let Some((s, e)) = u {
                union = Some(union.map_or((s, e), |(us, ue)| (us.min(s), ue.max(e))));
                snaps.push((c, snap));
            }
        }
        let r = self.purge_with(union);
        for (c, snap) in snaps {
            self.blocks.cpus[c].lock().flushed(&snap);
        }
        r
    }

    /// Pages unmapped from vmap blocks and not yet flushed.
    pub fn vmap_block_dirty_pages(&self) -> u64 {
        self.blocks
            .cpus
            .iter()
            .map(|m| m.lock().dirty_pages())
            .sum()
    }
}
