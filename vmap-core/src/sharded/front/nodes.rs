//! `ShardedVmap` as a [`VmapNodes`]: the trait's methods over the front's allocation and
//! free paths.

use super::{NO_OWNER, ShardedVmap};
use crate::VirtAddr;
use crate::error::VmapError;
use crate::request::AllocRequest;
use crate::sharded::VmapNodes;
use crate::space::VmapArea;
use crate::sync::atomic::Ordering;
use arch_api::sync::RawMutex;

/// Frees [`free_batch`](VmapNodes::free_batch) makes under one acquisition
/// of a node's lock.
const BATCH_LOCK_BREAK: u32 = 64;

impl<R: RawMutex + Send + Sync, L: Send> VmapNodes for ShardedVmap<R, L> {
    type Lazy = L;

    fn nr_nodes(&self) -> usize {
        self.nodes.len()
    }

    fn page_size(&self) -> u64 {
        self.page_size
    }

    fn range(&self) -> (VirtAddr, VirtAddr) {
        (VirtAddr::new(self.start), VirtAddr::new(self.end))
    }

    fn alloc_on(&self, node: usize, req: &AllocRequest) -> Result<VmapArea, VmapError> {
        let fit = req.validate(self.start, self.end, self.page_size)?;
        let nr = self.nodes.len();
        // Callers pass their CPU, almost always below `nr`: no division then.
        let i = if node < nr { node } else { node % nr };
        let r = match req.exact {
            Some(a) => self.alloc_exact(a.as_u64(), req, &fit),
            None => self.alloc_fast(i, req, &fit),
        };
        match r {
            Err(VmapError::NoSpace { .. }) => self.alloc_slow(i, req, &fit),
            r => r,
        }
    }

    fn free_area(&self, area: &VmapArea) -> Result<VmapArea, VmapError> {
        #[cfg(kmm_loom)]
        if crate::loom_mutation::MUTATION.active(crate::loom_mutation::FREE_BY_HASH) {
            // Broken variant (loom_free_broken): route the free by Linux's
            // address hash (`addr_to_node`: slice number modulo the number
            // of nodes) instead of the node recorded in the area. An area
            // whose slice went to another node is then looked for in the
            // wrong node.
            let n = (area.va_start.as_u64() / self.slice_size) % self.nodes.len() as u64;
            return self.free_on(n as u16, area.va_start);
        }
        self.free_on(area.node, area.va_start)
    }

    fn free(&self, addr: VirtAddr) -> Result<VmapArea, VmapError> {
        let owner = self.owner_of(addr.as_u64());
        if owner == NO_OWNER {
            return self.free_reserve(addr);
        }
        self.free_on(owner, addr)
    }

    /// One lock acquisition per run of addresses one node owns (a purge's
    /// list is mostly one node's, in address order), re-taken every 64
    /// frees so that other CPUs wait a bounded time.
    fn free_batch(&self, addrs: impl Iterator<Item = VirtAddr>) {
        let mut held = None;
        let mut since = 0;
        for addr in addrs {
            let a = addr.as_u64();
            let owner = self.owner_of(a);
            if owner as usize >= self.nodes.len() {
                drop(held.take());
                let _ = self.free_reserve(addr);
                continue;
            }
            let stale = !matches!(&held, Some((n, _)) if *n == owner);
            if stale || since == BATCH_LOCK_BREAK {
                drop(held.take());
                since = 0;
            }
            since += 1;
            let (_, st) = held.get_or_insert_with(|| (owner, self.nodes[owner as usize].lock()));
            let _ = self.free_locked(st, a, true);
        }
    }

    fn find(&self, addr: VirtAddr) -> Option<VmapArea> {
        let owner = self.owner_of(addr.as_u64());
        if owner == NO_OWNER {
            return self.reserve.lock().find(addr);
        }
        let mut st = self.nodes[owner as usize].lock();
        Self::slice_mut(&mut st, self.slice_of(addr.as_u64()))?
            .space
            .find(addr)
    }

    fn with_lazy<T>(&self, node: usize, f: impl FnOnce(&mut L) -> T) -> T {
        f(&mut self.nodes[node % self.nodes.len()].lock().lazy)
    }

    fn try_alloc_on(
        &self,
        node: usize,
        req: &AllocRequest,
        publish: impl FnOnce(&mut L, &VmapArea),
    ) -> Result<VmapArea, VmapError> {
        self.try_alloc(node, req, publish)
    }

    fn drain_pools(&self) {
        self.drain_all();
    }

    fn decay_pools(&self, full: bool) {
        self.decay(full);
    }

    fn resize(&self, addr: VirtAddr, size: u64) -> Result<VmapArea, VmapError> {
        let owner = self.owner_of(addr.as_u64());
        if owner == NO_OWNER {
            return self.reserve.lock().resize(addr, size);
        }
        // Inside the area's slice only (the slice's space bounds it); a
        // parked area in the way refuses too.
        let mut st = self.nodes[owner as usize].lock();
        Self::slice_mut(&mut st, self.slice_of(addr.as_u64()))
            .ok_or(VmapError::NotFound {
                addr: addr.as_u64(),
            })?
            .space
            .resize(addr, size)
    }

    fn busy_bytes(&self) -> u64 {
        let mut total = 0;
        for m in self.nodes.iter() {
            total += m
                .lock()
                .slices
                .iter()
                .map(|s| s.space.busy_bytes())
                .sum::<u64>();
        }
        let owned = self
            .owner
            .iter()
            .filter(|o| o.load(Ordering::Acquire) != NO_OWNER)
            .count() as u64;
        total + self.reserve.lock().busy_bytes() - owned * self.slice_size
    }
}
