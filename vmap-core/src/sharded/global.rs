//! `GlobalVmap`: the Linux-before-6.9 shape — one lock (`vmap_area_lock`)
//! around one space — behind the same [`VmapNodes`] API as the sharded front.

use super::VmapNodes;
use crate::VirtAddr;
use crate::error::VmapError;
use crate::node::VecSource;
use crate::policy::{DefaultPolicy, FreeAreaSearch};
use crate::request::AllocRequest;
use crate::space::{VmapArea, VmapSpace};
use arch_api::sync::{DefaultRawMutex, Mutex, RawMutex};

struct Inner<L, F: FreeAreaSearch> {
    space: VmapSpace<F, VecSource>,
    lazy: L,
}

/// One lock around one [`VmapSpace`] searched by policy `F`;
/// `nr_nodes() == 1`. The front of a vmalloc that has one space under one
/// lock (Linux before 6.9).
pub struct GlobalVmap<R: RawMutex = DefaultRawMutex, L = (), F: FreeAreaSearch = DefaultPolicy> {
    inner: Mutex<R, Inner<L, F>>,
    start: VirtAddr,
    end: VirtAddr,
    page_size: u64,
}

impl<R: RawMutex, L: Default, F: FreeAreaSearch> GlobalVmap<R, L, F> {
    /// A global-lock allocator over `[start, end)`.
    pub fn new(start: VirtAddr, end: VirtAddr, page_size: u64) -> Result<Self, VmapError> {
        let space = VmapSpace::new(start, end, page_size, VecSource::new())?;
        Ok(Self {
            inner: Mutex::new(Inner {
                space,
                lazy: L::default(),
            }),
            start,
            end,
            page_size,
        })
    }

    /// Runs `f` on the underlying space under the lock (vmallocinfo, stats).
    pub fn with_space<T>(&self, f: impl FnOnce(&mut VmapSpace<F, VecSource>) -> T) -> T {
        f(&mut self.inner.lock().space)
    }
}

impl<R: RawMutex + Sync + Send, L: Send, F: FreeAreaSearch> VmapNodes for GlobalVmap<R, L, F> {
    type Lazy = L;

    fn nr_nodes(&self) -> usize {
        1
    }

    fn page_size(&self) -> u64 {
        self.page_size
    }

    fn range(&self) -> (VirtAddr, VirtAddr) {
        (self.start, self.end)
    }

    fn alloc_on(&self, _: usize, req: &AllocRequest) -> Result<VmapArea, VmapError> {
        self.inner.lock().space.alloc_request(req)
    }

    fn alloc_counted(&self, _: usize, req: &AllocRequest) -> Result<(VmapArea, u32), VmapError> {
        let mut inner = self.inner.lock();
        let a = inner.space.alloc_request(req)?;
        #[cfg(feature = "stats")]
        let visited = inner.space.stats().last_nodes_visited;
        #[cfg(not(feature = "stats"))]
        let visited = 0;
        Ok((a, visited))
    }

    fn owner(&self, addr: VirtAddr) -> Option<usize> {
        // One node: the caller's record of areas is the only search.
        (self.start <= addr && addr < self.end).then_some(0)
    }

    fn free_batch(&self, addrs: impl Iterator<Item = VirtAddr>) {
        self.inner.lock().space.find_unlink_batch(addrs, |_, _| {});
    }

    fn free_area(&self, area: &VmapArea) -> Result<VmapArea, VmapError> {
        self.free(area.va_start)
    }

    fn free(&self, addr: VirtAddr) -> Result<VmapArea, VmapError> {
        self.inner.lock().space.find_unlink(addr)
    }

    fn find(&self, addr: VirtAddr) -> Option<VmapArea> {
        self.inner.lock().space.find(addr)
    }

    fn with_lazy<T>(&self, _: usize, f: impl FnOnce(&mut L) -> T) -> T {
        f(&mut self.inner.lock().lazy)
    }

    fn resize(&self, addr: VirtAddr, size: u64) -> Result<VmapArea, VmapError> {
        self.inner.lock().space.resize(addr, size)
    }

    fn try_alloc_on(
        &self,
        _: usize,
        req: &AllocRequest,
        publish: impl FnOnce(&mut L, &VmapArea),
    ) -> Result<VmapArea, VmapError> {
        // One lock: contended means there is nothing else to try.
        let mut inner = self.inner.try_lock().ok_or(VmapError::WouldBlock)?;
        let inner = &mut *inner;
        let a = inner.space.alloc_request(req)?;
        publish(&mut inner.lazy, &a);
        Ok(a)
    }

    fn drain_pools(&self) {}

    fn busy_bytes(&self) -> u64 {
        self.inner.lock().space.busy_bytes()
    }
}
