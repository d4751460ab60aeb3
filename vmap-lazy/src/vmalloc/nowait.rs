//! `vmalloc` with [`VmFlags::NOWAIT`] (Linux's `GFP_NOWAIT`): for callers
//! that must not wait, such as a kernel path holding a spinlock.
//!
//! The contract:
//!
//! * every lock is tried, none waited for: the front's
//!   ([`VmapNodes::try_alloc_on`]: a contended node may be replaced by
//!   another whose lock is free), the node's frame cache, and the page-table
//!   lock when a last-level table has to be built; contended:
//!   [`VmallocError::WouldBlock`], nothing changed;
//! * no synchronous purge, neither the shortage retry nor the policy's
//!   purge after an allocation: a shortage is reported as it is
//!   (`NoVirtualSpace`, `OutOfFrames`), and a later blocking call purges;
//! * frames come from the node's frame cache (its pool), refilled, when it
//!   runs short, by one call of the frame source; larger areas take theirs
//!   from the source in one call. A kernel's `FrameSource` must not sleep
//!   in those calls, as GFP_NOWAIT's page allocation does not;
//! * the area is recorded under the same acquisition of its node's lock
//!   that reserved it. Only the unwind of a request whose mapping failed
//!   after that takes the node's lock again, to give the range back.

use super::{Vmalloc, front_error};
use crate::area::AreaKind;
use crate::error::VmallocError;
use crate::flags::VmFlags;
use crate::lazy::NodeLazy;
use crate::purge::PurgePolicy;
use arch_api::{Platform, TlbFlush, VirtAddr};
use core::sync::atomic::Ordering::Relaxed;
use vmap_core::{VmapArea, VmapNodes};

impl<K, P, N> Vmalloc<'_, K, P, N>
where
    K: Platform,
    P: PurgePolicy,
    N: VmapNodes<Lazy = NodeLazy>,
{
    /// The `NOWAIT` path of [`vmalloc_with`](Self::vmalloc_with).
    pub(super) fn try_vmalloc_nowait(
        &self,
        cpu: usize,
        pages: u64,
        align: u64,
        flags: VmFlags,
        caller: &'static str,
    ) -> Result<VirtAddr, VmallocError> {
        let req = Self::request(pages, align, flags, self.nodes.range());
        let area = self
            .nodes
            .try_alloc_on(cpu, &req, |nl, a: &VmapArea| {
                nl.areas
                    .insert(Self::info(a, pages, caller, AreaKind::Vmalloc, flags));
            })
            .map_err(front_error)?;
        #[cfg(feature = "testing")]
        self.test.on_alloc(area.va_start, area.va_end);
        let node = self.node_of(area.node);
        let va = Self::mapped_start(&area, flags);
        if let Err(e) = self.map.try_map_new(&self.per_node[node].frames, va, pages) {
            // Recorded and reserved, never mapped nor returned: undo both.
            self.nodes
                .with_lazy(node, |nl| nl.areas.remove(va.as_u64()));
            let _ = self.nodes.free_area(&area);
            return Err(e);
        }
        self.tlb.sync_new_entries();
        self.per_node[node].allocs.fetch_add(1, Relaxed);
        Ok(va)
    }
}
