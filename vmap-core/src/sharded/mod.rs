//! Fronts for concurrent use (feature `alloc`; Linux 6.9's per-node split of
//! the global `vmap_area_lock`, 2024): [`ShardedVmap`],
//! per-node locks with partitioned free space, and [`GlobalVmap`], one lock
//! around one [`VmapSpace`](crate::VmapSpace) for comparison. Both implement
//! [`VmapNodes`], which the harness and vmap-lazy program against.

mod front;
mod global;
mod pool;

pub use front::{ShardedConfig, ShardedVmap};
pub use global::GlobalVmap;

use crate::VirtAddr;
use crate::error::VmapError;
use crate::request::AllocRequest;
use crate::space::VmapArea;

/// A concurrent vmap allocator made of `vmap_node`s (one for the global
/// variant). Every method takes `&self`; locking is internal.
pub trait VmapNodes: Sync {
    /// Per-node lazy-free state (vmap-lazy's purge list), kept under the
    /// node's lock.
    type Lazy;

    /// Number of nodes.
    fn nr_nodes(&self) -> usize;

    /// The page size.
    fn page_size(&self) -> u64;

    /// `[start, end)` of the whole space.
    fn range(&self) -> (VirtAddr, VirtAddr);

    /// Allocates from node `node` (taken modulo [`nr_nodes`](Self::nr_nodes);
    /// usually the calling CPU).
    fn alloc_on(&self, node: usize, req: &AllocRequest) -> Result<VmapArea, VmapError>;

    /// [`alloc_on`](Self::alloc_on), also saying how many tree nodes the
    /// search visited (a purge policy's cost signal; 0 where the front does
    /// not count).
    fn alloc_counted(&self, node: usize, req: &AllocRequest) -> Result<(VmapArea, u32), VmapError> {
        self.alloc_on(node, req).map(|a| (a, 0))
    }

    /// The plain form of [`alloc_on`](Self::alloc_on).
    fn alloc(
        &self,
        node: usize,
        size: u64,
        align: u64,
        vstart: VirtAddr,
        vend: VirtAddr,
    ) -> Result<VmapArea, VmapError> {
        self.alloc_on(node, &AllocRequest::new(size, align, vstart, vend))
    }

    /// Frees an area through the node recorded in it (find and unlink under
    /// one lock acquisition). Unknown or already freed: `NotFound`.
    fn free_area(&self, area: &VmapArea) -> Result<VmapArea, VmapError>;

    /// Frees the area starting at `addr`, finding its node from the address.
    fn free(&self, addr: VirtAddr) -> Result<VmapArea, VmapError>;

    /// The live area containing `addr`.
    fn find(&self, addr: VirtAddr) -> Option<VmapArea>;

    /// The node that owns the live area starting at `addr`, as a caller
    /// that keeps its own per-node record of areas needs it (vfree's one
    /// search). `None` if no live area contains `addr`; a front whose
    /// answer does not depend on the area may answer without a search (then
    /// the caller's own record says whether the area exists).
    fn owner(&self, addr: VirtAddr) -> Option<usize> {
        self.find(addr).map(|a| usize::from(a.node))
    }

    /// [`free`](Self::free) for each of `addrs` (a purge's lazy areas, all
    /// known live); fronts may take their lock once for the lot.
    fn free_batch(&self, addrs: impl Iterator<Item = VirtAddr>) {
        for a in addrs {
            let _ = self.free(a);
        }
    }

    /// The non-blocking form of [`alloc_on`](Self::alloc_on) (Linux's
    /// `GFP_NOWAIT`): never waits for a contended lock and never runs the
    /// slow path (no draining of other nodes' pools). A front may serve the
    /// request from another node whose lock is free; when every lock it
    /// could use is held: [`VmapError::WouldBlock`], nothing changed.
    /// `publish` runs on the lazy state of the node the area belongs to,
    /// under the same acquisition of that node's lock that allocated it,
    /// so the caller records the area without taking a lock again.
    ///
    /// The default refuses every request with `WouldBlock` (a front that
    /// cannot try its locks).
    fn try_alloc_on(
        &self,
        node: usize,
        req: &AllocRequest,
        publish: impl FnOnce(&mut Self::Lazy, &VmapArea),
    ) -> Result<VmapArea, VmapError> {
        let _ = (node, req, publish);
        Err(VmapError::WouldBlock)
    }

    /// Resizes the live area starting at `addr` in place to `size` bytes,
    /// under one acquisition of its lock (vrealloc growing into the free
    /// range after an area): `NoSpace` (or another error) and nothing
    /// changed when the range after it is not free. The default refuses.
    fn resize(&self, addr: VirtAddr, size: u64) -> Result<VmapArea, VmapError> {
        let _ = size;
        Err(VmapError::NotFound {
            addr: addr.as_u64(),
        })
    }

    /// Runs `f` on node `node`'s lazy state under its lock.
    fn with_lazy<T>(&self, node: usize, f: impl FnOnce(&mut Self::Lazy) -> T) -> T;

    /// Returns every pooled (recently freed, kept for reuse) area to the free
    /// space, e.g. before retrying a failed allocation. The sharded front
    /// also gives every empty slice back to its reserve.
    fn drain_pools(&self);

    /// Ages the pools (Linux's `decay_va_pool_node`, run by every purge):
    /// each size class of each node returns its oldest quarter (rounded up)
    /// to the free space, or everything when `full` (memory pressure), and
    /// slices left empty go back to the reserve. A node that stops
    /// allocating so empties a pool of depth `d` within
    /// `log(d) / log(4/3) + 2` calls (14 for the default depth 64). Only
    /// parked areas are released: the placement and no-space guarantees
    /// stay as they are. Fronts without pools do nothing.
    fn decay_pools(&self, full: bool) {
        let _ = full;
    }

    /// Bytes in live and pooled areas.
    fn busy_bytes(&self) -> u64;
}
