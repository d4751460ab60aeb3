//! `ShardedVmap`: per-node locks over partitioned free space (as Linux 6.9's
//! `vmap_node`s, 2024, and
//! beyond Linux 6.9, which shards the busy trees but still serialises every
//! allocation on one global free-tree lock).
//!
//! The space is cut into aligned *slices* of `slice_size` bytes. A shared
//! reserve (itself a [`VmapSpace`], where a slice handed out is a busy area)
//! owns what no node owns. Each `vmap_node` has its own lock, its own slices
//! (each a [`VmapSpace`] with busy and free trees), a size-segregated pool of
//! recently freed areas and a lazy-list slot. An allocation on node `i`:
//!
//! 1. takes a pooled area of exactly that size, if one satisfies the request;
//! 2. else the lowest fit in node `i`'s slices, in address order;
//! 3. else a new slice from the reserve (lowest free slice in the window);
//! 4. else drains its own pool and retries its slices;
//! 5. else steals: an *empty* slice of a neighbour changes owner, or failing
//!    that the area is carved from a neighbour's slice (it then belongs to,
//!    and returns to, that neighbour);
//! 6. else allocates straight from the reserve (node id `nr_nodes`).
//!
//! Requests larger than a quarter slice and exact-address requests go to
//! the reserve (or, for an exact address, to the slice's owner) directly.
//!
//! A request that would fail there with `NoSpace` is retried once, on a
//! cold path: every node's pool is drained, every empty slice (no live and
//! no parked area) goes back to the reserve, and the request is tried on
//! its own node (small requests), in the reserve and, if it fits in one
//! slice, in every node's slices. [`drain_pools`](super::VmapNodes::drain_pools)
//! gives empty slices back too. An exact request for a range parked in a
//! pool takes it out of the pool. Slices are not given back when their last
//! area is freed: a node that frees its only area and allocates again would
//! otherwise take the reserve lock twice per pair. Instead the pools decay
//! ([`VmapNodes::decay_pools`](super::VmapNodes::decay_pools), `front/decay.rs`):
//! every purge releases the oldest quarter of each pool and gives the slices
//! left empty back, so a node that stops allocating returns its space within
//! a bounded number of purges. Non-blocking requests
//! ([`VmapNodes::try_alloc_on`](super::VmapNodes::try_alloc_on)) are in
//! `front/nowait.rs`. The node's slices are handled in `front/slices.rs`, its
//! pool in `front/pools.rs`, the [`VmapNodes`](super::VmapNodes) methods in
//! `front/nodes.rs`.
//!
//! **Placement guarantee.** Every area lies in `[vstart, vend)`, satisfies
//! `align`, `phase` and `nocross`, and overlaps no other live area. Within
//! the slice (or reserve) it was carved from, it is the lowest fit. It is
//! NOT the lowest fit of the whole space: another node's slice, or the pool
//! (which reuses a recently freed area of the same size), may give a higher
//! address.
//!
//! **No-space guarantee** (issue 17). Pooled areas and empty slices count as
//! free. With no concurrent call, a request fails with `NoSpace` only if no
//! range satisfying it (window, alignment, phase, `nocross`, exact address)
//! is free of live areas and
//!
//! * lies inside one slice, or
//! * meets no slice that holds a live area of a node.
//!
//! So with nothing allocated every valid request is served; the only free
//! space a request can miss is a range that crosses a slice boundary into,
//! or out of, a slice a node is using (the reserve sees such a slice as one
//! busy block). With concurrent calls the same holds of what the retry saw
//! of each node and of the reserve, one lock at a time: another CPU may take
//! a slice or a range in between (or a slice being stolen is in neither
//! node's list for a moment), and the request then fails although the space
//! was free at some point during the call.
//!
//! Locks: a node lock may be held while the reserve lock is taken; never two
//! node locks at once.

use super::pool::{Pool, PoolEntry};
use crate::VirtAddr;
use crate::error::VmapError;
use crate::node::VecSource;
use crate::policy::DefaultPolicy;
use crate::request::{AllocRequest, Fit};
use crate::space::{VmapArea, VmapSpace};
use crate::sync::atomic::{AtomicU16, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;
use arch_api::sync::{DefaultRawMutex, Mutex, MutexGuard, RawMutex};

mod decay;
mod nodes;
mod nowait;
mod pools;
mod slices;

/// No node owns the slice: the reserve does.
const NO_OWNER: u16 = u16::MAX;

type Space = VmapSpace<DefaultPolicy, VecSource>;

/// How to build a [`ShardedVmap`].
#[derive(Clone, Copy, Debug)]
pub struct ShardedConfig {
    /// Number of nodes; clamped to `1..=128`. Usually the number of CPUs.
    pub nr_nodes: usize,
    /// Slice size in bytes (a power of two, multiple of the page size); `None`
    /// picks `total / (4 * nr_nodes)` rounded down to a power of two, within
    /// one page and 1 GiB.
    pub slice_size: Option<u64>,
    /// Areas kept per size class in each node's pool (0 disables pools).
    pub pool_depth: usize,
}

impl ShardedConfig {
    /// Defaults for `nr_nodes` nodes: automatic slice size, pool depth 64.
    pub const fn new(nr_nodes: usize) -> Self {
        Self {
            nr_nodes,
            slice_size: None,
            pool_depth: 64,
        }
    }
}

struct Slice {
    /// Slice number: `start / slice_size`.
    index: u64,
    space: Space,
}

struct NodeState<L> {
    id: u16,
    /// Sorted by `index`.
    slices: Vec<Slice>,
    pool: Pool,
    lazy: L,
}

/// Per-node vmap allocator with partitioned free space.
pub struct ShardedVmap<R: RawMutex = DefaultRawMutex, L = ()> {
    start: u64,
    end: u64,
    page_size: u64,
    slice_size: u64,
    /// `log2(page_size)` and `log2(slice_size)` (both powers of two): the
    /// fast paths shift rather than divide.
    page_shift: u32,
    slice_shift: u32,
    /// Slice number of `owner[0]`.
    first_slice: u64,
    nodes: Box<[Mutex<R, NodeState<L>>]>,
    reserve: Mutex<R, Space>,
    /// Owner node of each whole slice inside the space (`NO_OWNER`: reserve).
    owner: Box<[AtomicU16]>,
}

impl<R: RawMutex, L: Default> ShardedVmap<R, L> {
    /// `nr_nodes` nodes (clamped to `1..=128`) over `[start, end)`.
    pub fn new(
        start: VirtAddr,
        end: VirtAddr,
        page_size: u64,
        nr_nodes: usize,
    ) -> Result<Self, VmapError> {
        Self::with_config(start, end, page_size, ShardedConfig::new(nr_nodes))
    }

    /// A sharded allocator as `cfg` says.
    pub fn with_config(
        start: VirtAddr,
        end: VirtAddr,
        page_size: u64,
        cfg: ShardedConfig,
    ) -> Result<Self, VmapError> {
        let nr = cfg.nr_nodes.clamp(1, 128);
        let reserve = Space::new(start, end, page_size, VecSource::new())?.with_node_id(nr as u16);
        let (s, e) = (start.as_u64(), end.as_u64());
        let slice_size = match cfg.slice_size {
            Some(sz) => {
                if !sz.is_power_of_two() {
                    return Err(VmapError::AlignNotPowerOfTwo { align: sz });
                }
                if sz % page_size != 0 {
                    return Err(VmapError::NotPageMultiple {
                        what: "slice_size",
                        value: sz,
                        page_size,
                    });
                }
                sz
            }
            None => {
                let want = (e - s) / (4 * nr as u64);
                let p2 = if want == 0 {
                    1
                } else {
                    1u64 << (63 - want.leading_zeros())
                };
                p2.clamp(page_size, 1 << 30)
            }
        };
        let first_slice = s.div_ceil(slice_size);
        let last_slice = e / slice_size;
        let count = last_slice.saturating_sub(first_slice) as usize;
        let owner = (0..count).map(|_| AtomicU16::new(NO_OWNER)).collect();
        let nodes = (0..nr)
            .map(|i| {
                Mutex::new(NodeState {
                    id: i as u16,
                    slices: Vec::new(),
                    pool: Pool::new(cfg.pool_depth),
                    lazy: L::default(),
                })
            })
            .collect();
        Ok(Self {
            start: s,
            end: e,
            page_size,
            slice_size,
            page_shift: page_size.trailing_zeros(),
            slice_shift: slice_size.trailing_zeros(),
            first_slice,
            nodes,
            reserve: Mutex::new(reserve),
            owner,
        })
    }
}

impl<R: RawMutex, L> ShardedVmap<R, L> {
    /// The slice size in bytes.
    pub fn slice_size(&self) -> u64 {
        self.slice_size
    }

    /// The node id areas allocated straight from the reserve carry.
    pub fn reserve_id(&self) -> u16 {
        self.nodes.len() as u16
    }

    /// The slice number of `addr`.
    #[inline]
    pub(super) fn slice_of(&self, addr: u64) -> u64 {
        addr >> self.slice_shift
    }

    /// Frees the area starting at `addr` in node `node`: one search of its
    /// slice's busy tree finds the live area; a size the pool keeps, with
    /// room in its class, is parked, anything else unlinked.
    pub(super) fn free_on(&self, node: u16, addr: VirtAddr) -> Result<VmapArea, VmapError> {
        if node as usize >= self.nodes.len() {
            return self.free_reserve(addr);
        }
        let mut st = self.nodes[node as usize].lock();
        self.free_locked(&mut st, addr.as_u64(), false)
    }

    /// [`free_on`](Self::free_on) under the node's lock, held by the caller
    /// (`in_run`: one of a batch of frees in address order).
    #[inline(always)]
    fn free_locked(
        &self,
        st: &mut NodeState<L>,
        a: u64,
        in_run: bool,
    ) -> Result<VmapArea, VmapError> {
        let index = self.slice_of(a);
        let Some(pos) = st.slices.binary_search_by_key(&index, |s| s.index).ok() else {
            return Err(VmapError::NotFound { addr: a });
        };
        let sl = &mut st.slices[pos];
        let (n, size) = sl.space.live_at(a, in_run)?;
        if let Some(c) = st
            .pool
            .class(size >> self.page_shift)
            .filter(|&c| st.pool.has_room(c))
        {
            st.pool.push(
                c,
                PoolEntry {
                    slice: index,
                    node: n,
                    start: a,
                },
            );
            return Ok(sl.space.park_node(n));
        }
        sl.space.unlink_live(n, in_run)
    }

    /// Steps 1 to 6 of the module docs for a request without an exact
    /// address. Only step 1, a pool hit, is inline: the rest is out of line
    /// so that the hit path keeps a small frame.
    #[inline]
    pub(super) fn alloc_fast(
        &self,
        i: usize,
        req: &AllocRequest,
        fit: &Fit,
    ) -> Result<VmapArea, VmapError> {
        if fit.size <= self.slice_size / 4 {
            let mut guard = self.nodes[i].lock();
            if let Some(a) = self.take_pooled(&mut guard, fit) {
                return Ok(a);
            }
            return self.alloc_unpooled(i, guard, req, fit);
        }
        self.alloc_reserve(req)
    }

    /// Steps 2 to 6 (node `i`'s lock held on entry).
    #[inline(never)]
    fn alloc_unpooled(
        &self,
        i: usize,
        mut guard: MutexGuard<'_, R, NodeState<L>>,
        req: &AllocRequest,
        fit: &Fit,
    ) -> Result<VmapArea, VmapError> {
        let st = &mut *guard;
        if let Some(a) = self.alloc_in_slices(st, req, fit) {
            return Ok(a);
        }
        if let Some(a) = self.grow(st, req, fit) {
            return Ok(a);
        }
        if st.pool.len() > 0 {
            Self::drain_locked(st);
            if let Some(a) = self.alloc_in_slices(st, req, fit) {
                return Ok(a);
            }
        }
        drop(guard);
        let nr = self.nodes.len();
        for k in 1..nr {
            if let Some(a) = self.steal(i, (i + k) % nr, req, fit) {
                return Ok(a);
            }
        }
        self.alloc_reserve(req)
    }

    /// Frees an area of the reserve.
    #[inline(never)]
    pub(super) fn free_reserve(&self, addr: VirtAddr) -> Result<VmapArea, VmapError> {
        self.reserve.lock().find_unlink(addr)
    }

    /// Straight from the reserve (large requests, step 6).
    #[inline(never)]
    fn alloc_reserve(&self, req: &AllocRequest) -> Result<VmapArea, VmapError> {
        self.reserve.lock().alloc_request(req)
    }

    /// An exact request `[a, a + size)`: in the slice's owner if a node owns
    /// the slice holding `a`, else in the reserve.
    pub(super) fn alloc_exact(
        &self,
        a: u64,
        req: &AllocRequest,
        fit: &Fit,
    ) -> Result<VmapArea, VmapError> {
        let owner = self.owner_of(a);
        if owner == NO_OWNER {
            return self.reserve.lock().alloc_request(req);
        }
        let no_space = |e| match e {
            // The range runs past the slice.
            VmapError::OutsideSpace { .. } => fit.no_space(),
            e => e,
        };
        let mut guard = self.nodes[owner as usize].lock();
        let st = &mut *guard;
        let index = self.slice_of(a);
        // The slice may have changed owner since `owner` was read.
        let Ok(pos) = st.slices.binary_search_by_key(&index, |s| s.index) else {
            return Err(fit.no_space());
        };
        let r = st.slices[pos].space.alloc_request(req).map_err(no_space);
        if r.is_ok() || st.pool.len() == 0 {
            return r;
        }
        // Pooled areas are free space the node only remembers: an exact
        // request for (part of) one takes it out of the pool.
        let sl = &mut st.slices[pos];
        let mut released = false;
        st.pool
            .take_overlapping(index, fit.vstart, fit.vend, self.page_size, |e| {
                sl.space.release_parked(e.node);
                released = true;
            });
        if !released {
            return r;
        }
        sl.space.alloc_request(req).map_err(no_space)
    }

    /// The retry after `NoSpace` (cold). Free space may be out of the
    /// request's reach in three places: parked in a pool, in an empty slice
    /// a node keeps (the reserve sees the whole slice as busy), or inside a
    /// slice in use, which a request larger than a quarter slice never
    /// searches. So: drain every pool and give every empty slice back to the
    /// reserve, then try the request's own node (small requests), the
    /// reserve, and, if the request fits in a slice, every node's slices.
    /// See "No-space guarantee" in the module docs.
    #[cold]
    #[inline(never)]
    pub(super) fn alloc_slow(
        &self,
        i: usize,
        req: &AllocRequest,
        fit: &Fit,
    ) -> Result<VmapArea, VmapError> {
        self.drain_all();
        if let Some(a) = req.exact {
            return self.alloc_exact(a.as_u64(), req, fit);
        }
        if fit.size <= self.slice_size / 4 {
            // A slice of its own again, rather than a small area in the
            // reserve, which would keep the slice from being handed out.
            let mut st = self.nodes[i].lock();
            if let Some(a) = self.alloc_in_slices(&mut st, req, fit) {
                return Ok(a);
            }
            if let Some(a) = self.grow(&mut st, req, fit) {
                return Ok(a);
            }
        }
        let r = self.reserve.lock().alloc_request(req);
        if !matches!(r, Err(VmapError::NoSpace { .. })) || fit.size > self.slice_size {
            return r;
        }
        let nr = self.nodes.len();
        for k in 0..nr {
            let mut st = self.nodes[(i + k) % nr].lock();
            if let Some(a) = self.alloc_in_slices(&mut st, req, fit) {
                return Ok(a);
            }
        }
        r
    }

    /// Checks every node's slices, pools and owner entries, and the reserve.
    pub fn check_invariants(&self) -> Result<(), &'static str> {
        for m in self.nodes.iter() {
            let st = m.lock();
            let mut parked = 0;
            for sl in &st.slices {
                sl.space.check_invariants()?;
                parked += sl.space.parked();
                let o = self
                    .owner_slot(sl.index * self.slice_size)
                    .ok_or("slice outside the owner table")?;
                if o.load(Ordering::Acquire) != st.id || sl.space.node_id() != st.id {
                    return Err("slice owner mismatch");
                }
                let s0 = VirtAddr::new(sl.index * self.slice_size);
                let held = self.reserve.lock().find(s0);
                if held.is_none_or(|a| a.va_start != s0 || a.size() != self.slice_size) {
                    return Err("node slice not held in the reserve");
                }
            }
            if parked != st.pool.len() {
                return Err("parked areas missing from the pool (leak)");
            }
        }
        self.reserve.lock().check_invariants()
    }

    /// Live areas of every node and the reserve (vmallocinfo), unsorted
    /// across nodes. Slice placeholders in the reserve are skipped.
    pub fn for_each_area(&self, mut f: impl FnMut(VmapArea)) {
        for m in self.nodes.iter() {
            let st = m.lock();
            for sl in &st.slices {
                sl.space.iter().for_each(&mut f);
            }
        }
        let r = self.reserve.lock();
        for a in r.iter() {
            let owned = self.owner_slot(a.va_start.as_u64()).is_some_and(|o| {
                o.load(Ordering::Acquire) != NO_OWNER && a.size() == self.slice_size
            });
            if !owned {
                f(a);
            }
        }
    }
}
