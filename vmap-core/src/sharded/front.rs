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
//! slice, in every node's slices. [`drain_pools`](VmapNodes::drain_pools)
//! gives empty slices back too. An exact request for a range parked in a
//! pool takes it out of the pool. Slices are not given back when their last
//! area is freed: a node that frees its only area and allocates again would
//! otherwise take the reserve lock twice per pair. Instead the pools decay
//! ([`VmapNodes::decay_pools`], `front/decay.rs`): every purge releases the
//! oldest quarter of each pool and gives the slices left empty back, so a
//! node that stops allocating returns its space within a bounded number of
//! purges. Non-blocking requests ([`VmapNodes::try_alloc_on`]) are in
//! `front/nowait.rs`.
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

use super::VmapNodes;
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
mod nowait;

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

    /// The owner entry of the slice holding `addr`, if it is a whole slice.
    fn owner_slot(&self, addr: u64) -> Option<&AtomicU16> {
        let idx = (addr / self.slice_size).checked_sub(self.first_slice)?;
        self.owner.get(idx as usize)
    }

    /// Request clipped to one slice, or `None` if it cannot fit there.
    fn clip(&self, req: &AllocRequest, fit: &Fit, index: u64) -> Option<AllocRequest> {
        let s0 = index * self.slice_size;
        let s1 = s0 + self.slice_size;
        let lo = fit.vstart.max(s0);
        let hi = fit.vend.min(s1);
        if lo >= hi || hi - lo < fit.size {
            return None;
        }
        Some(AllocRequest {
            vstart: VirtAddr::new(lo),
            vend: VirtAddr::new(hi),
            ..*req
        })
    }

    fn alloc_in_slices(
        &self,
        st: &mut NodeState<L>,
        req: &AllocRequest,
        fit: &Fit,
    ) -> Option<VmapArea> {
        for sl in &mut st.slices {
            if let Some(r) = self.clip(req, fit, sl.index) {
                if let Ok(a) = sl.space.alloc_request(&r) {
                    return Some(a);
                }
            }
        }
        None
    }

    fn new_slice_space(&self, index: u64, node: u16) -> Result<Space, VmapError> {
        let s0 = index * self.slice_size;
        Ok(Space::new(
            VirtAddr::new(s0),
            VirtAddr::new(s0 + self.slice_size),
            self.page_size,
            VecSource::new(),
        )?
        .with_node_id(node))
    }

    fn insert_slice(st: &mut NodeState<L>, sl: Slice) -> usize {
        let pos = st.slices.partition_point(|x| x.index < sl.index);
        st.slices.insert(pos, sl);
        pos
    }

    /// Takes a new slice from the reserve for node `st` (node lock held).
    fn grow(&self, st: &mut NodeState<L>, req: &AllocRequest, fit: &Fit) -> Option<VmapArea> {
        self.grow_in(st, req, fit, self.reserve.lock())
    }

    /// [`grow`](Self::grow) with the reserve already locked.
    fn grow_in(
        &self,
        st: &mut NodeState<L>,
        req: &AllocRequest,
        fit: &Fit,
        mut reserve: MutexGuard<'_, R, Space>,
    ) -> Option<VmapArea> {
        let ss = self.slice_size;
        let lo = (fit.vstart / ss * ss).max(self.start);
        let hi = fit.vend.div_ceil(ss).saturating_mul(ss).min(self.end);
        let slot = reserve
            .alloc(ss, ss, VirtAddr::new(lo), VirtAddr::new(hi))
            .ok()?;
        let index = slot.va_start.as_u64() / ss;
        let space = match self.new_slice_space(index, st.id) {
            Ok(s) => s,
            Err(_) => {
                // Give the slot back; nothing changed.
                let _ = reserve.find_unlink(slot.va_start);
                return None;
            }
        };
        if let Some(o) = self.owner_slot(slot.va_start.as_u64()) {
            o.store(st.id, Ordering::Release);
        }
        drop(reserve);
        let pos = Self::insert_slice(st, Slice { index, space });
        let r = self.clip(req, fit, index)?;
        st.slices[pos].space.alloc_request(&r).ok()
    }

    fn take_pooled(&self, st: &mut NodeState<L>, fit: &Fit) -> Option<VmapArea> {
        let c = st.pool.class(fit.size / self.page_size)?;
        let e = st.pool.take(c, |a| fit.accepts(a))?;
        let sl = Self::slice_mut(st, e.slice)?;
        Some(sl.space.unpark(e.node))
    }

    fn slice_mut(st: &mut NodeState<L>, index: u64) -> Option<&mut Slice> {
        let pos = st.slices.binary_search_by_key(&index, |s| s.index).ok()?;
        Some(&mut st.slices[pos])
    }

    fn drain_locked(st: &mut NodeState<L>) {
        for e in st.pool.take_all() {
            if let Some(sl) = Self::slice_mut(st, e.slice) {
                sl.space.release_parked(e.node);
            }
        }
    }

    /// Steal from node `j` for node `i` (no lock held on entry).
    fn steal(&self, i: usize, j: usize, req: &AllocRequest, fit: &Fit) -> Option<VmapArea> {
        let mut victim = self.nodes[j].lock();
        // a) An empty slice of j intersecting the window changes owner.
        let pos = victim
            .slices
            .iter()
            .position(|s| s.space.is_empty() && self.clip(req, fit, s.index).is_some());
        if let Some(pos) = pos {
            #[cfg(kmm_loom)]
            if crate::loom_mutation::MUTATION.active(crate::loom_mutation::STEAL_UNCHECKED) {
                // Broken variant (loom_steal_broken): the emptiness check is
                // made under one acquisition of the victim's lock and the
                // slice taken under a second one, without checking again;
                // the owner may have allocated in it in between.
                drop(victim);
                victim = self.nodes[j].lock();
            }
            let mut sl = victim.slices.remove(pos);
            if let Some(o) = self.owner_slot(sl.index * self.slice_size) {
                o.store(i as u16, Ordering::Release);
            }
            drop(victim);
            sl.space.set_node_id(i as u16);
            let index = sl.index;
            let mut st = self.nodes[i].lock();
            let pos = Self::insert_slice(&mut st, sl);
            let r = self.clip(req, fit, index)?;
            return st.slices[pos].space.alloc_request(&r).ok();
        }
        // b) Carve from j's slices; the area belongs to j.
        self.alloc_in_slices(&mut victim, req, fit)
    }

    fn free_on(&self, node: u16, addr: VirtAddr) -> Result<VmapArea, VmapError> {
        let a = addr.as_u64();
        if node as usize >= self.nodes.len() {
            return self.reserve.lock().find_unlink(addr);
        }
        let mut st = self.nodes[node as usize].lock();
        let st = &mut *st;
        let index = a / self.slice_size;
        let Some(pos) = st.slices.binary_search_by_key(&index, |s| s.index).ok() else {
            return Err(VmapError::NotFound { addr: a });
        };
        let sl = &mut st.slices[pos];
        let pages = sl
            .space
            .find(addr)
            .filter(|x| x.va_start == addr)
            .ok_or(VmapError::NotFound { addr: a })?
            .size()
            / self.page_size;
        if let Some(c) = st.pool.class(pages).filter(|&c| st.pool.has_room(c)) {
            let (n, area) = sl.space.park(a)?;
            st.pool.push(
                c,
                PoolEntry {
                    slice: index,
                    node: n,
                    start: a,
                },
            );
            return Ok(area);
        }
        sl.space.find_unlink(addr)
    }

    /// Steps 1 to 6 of the module docs for a request without an exact
    /// address.
    #[inline]
    fn alloc_fast(&self, i: usize, req: &AllocRequest, fit: &Fit) -> Result<VmapArea, VmapError> {
        let nr = self.nodes.len();
        if fit.size <= self.slice_size / 4 {
            let mut guard = self.nodes[i].lock();
            let st = &mut *guard;
            if let Some(a) = self.take_pooled(st, fit) {
                return Ok(a);
            }
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
            for k in 1..nr {
                if let Some(a) = self.steal(i, (i + k) % nr, req, fit) {
                    return Ok(a);
                }
            }
        }
        self.reserve.lock().alloc_request(req)
    }

    /// An exact request `[a, a + size)`: in the slice's owner if a node owns
    /// the slice holding `a`, else in the reserve.
    fn alloc_exact(&self, a: u64, req: &AllocRequest, fit: &Fit) -> Result<VmapArea, VmapError> {
        let owner = self
            .owner_slot(a)
            .map_or(NO_OWNER, |o| o.load(Ordering::Acquire));
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
        let index = a / self.slice_size;
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
    fn alloc_slow(&self, i: usize, req: &AllocRequest, fit: &Fit) -> Result<VmapArea, VmapError> {
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

    /// Gives node `st`'s empty slices (no live nor parked area) back to the
    /// reserve (node lock held), so that requests spanning them, or larger
    /// than a quarter slice, can use their space again.
    fn give_back_empty(&self, st: &mut NodeState<L>) {
        if !st.slices.iter().any(|s| s.space.is_empty()) {
            return;
        }
        let mut reserve = self.reserve.lock();
        st.slices.retain(|sl| {
            if !sl.space.is_empty() {
                return true;
            }
            let s0 = sl.index * self.slice_size;
            // Under the reserve lock, so a free of an address in the slice
            // that reads NO_OWNER (a double free) waits for the unlink below
            // and then finds nothing.
            if let Some(o) = self.owner_slot(s0) {
                o.store(NO_OWNER, Ordering::Release);
            }
            // Cannot fail: the slice has been busy in the reserve since
            // `grow` handed it out.
            let _ = reserve.find_unlink(VirtAddr::new(s0));
            false
        });
    }

    /// [`drain_pool`](Self::drain_pool) on every node.
    fn drain_all(&self) {
        for i in 0..self.nodes.len() {
            self.drain_pool(i);
        }
    }

    /// Drains node `node`'s pool and gives its empty slices back to the
    /// reserve.
    pub fn drain_pool(&self, node: usize) {
        let node = node % self.nodes.len();
        #[cfg(kmm_loom)]
        if crate::loom_mutation::MUTATION.active(crate::loom_mutation::DRAIN_TWO_PHASE) {
            // Broken variant (loom_drain_broken): the drain copies the pool
            // under one lock acquisition, releases the copied areas under a
            // second, then clears the pool — dropping any area parked in
            // between, which then stays busy forever (a leak).
            let snap = self.nodes[node].lock().pool.snapshot();
            let mut st = self.nodes[node].lock();
            for e in snap {
                if let Some(sl) = Self::slice_mut(&mut st, e.slice) {
                    sl.space.release_parked(e.node);
                }
            }
            st.pool.clear();
            return;
        }
        #[cfg(kmm_loom)]
        if crate::loom_mutation::MUTATION.active(crate::loom_mutation::GIVE_BACK_UNCHECKED) {
            // Broken variant (loom_give_back_broken): the empty slices are
            // picked under one acquisition of the node's lock and given back
            // under a second one, without checking again; the node may have
            // allocated in one of them in between.
            let empty: Vec<u64> = {
                let mut st = self.nodes[node].lock();
                Self::drain_locked(&mut st);
                let e = st.slices.iter().filter(|s| s.space.is_empty());
                e.map(|s| s.index).collect()
            };
            let mut st = self.nodes[node].lock();
            let mut reserve = self.reserve.lock();
            st.slices.retain(|sl| {
                if !empty.contains(&sl.index) {
                    return true;
                }
                let s0 = sl.index * self.slice_size;
                if let Some(o) = self.owner_slot(s0) {
                    o.store(NO_OWNER, Ordering::Release);
                }
                let _ = reserve.find_unlink(VirtAddr::new(s0));
                false
            });
            return;
        }
        let mut st = self.nodes[node].lock();
        Self::drain_locked(&mut st);
        self.give_back_empty(&mut st);
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
        let i = node % self.nodes.len();
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
        let owner = self
            .owner_slot(addr.as_u64())
            .map_or(NO_OWNER, |o| o.load(Ordering::Acquire));
        if owner == NO_OWNER {
            return self.reserve.lock().find_unlink(addr);
        }
        self.free_on(owner, addr)
    }

    fn find(&self, addr: VirtAddr) -> Option<VmapArea> {
        let owner = self
            .owner_slot(addr.as_u64())
            .map_or(NO_OWNER, |o| o.load(Ordering::Acquire));
        if owner == NO_OWNER {
            return self.reserve.lock().find(addr);
        }
        let mut st = self.nodes[owner as usize].lock();
        Self::slice_mut(&mut st, addr.as_u64() / self.slice_size)?
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
        let owner = self
            .owner_slot(addr.as_u64())
            .map_or(NO_OWNER, |o| o.load(Ordering::Acquire));
        if owner == NO_OWNER {
            return self.reserve.lock().resize(addr, size);
        }
        // Inside the area's slice only (the slice's space bounds it); a
        // parked area in the way refuses too.
        let mut st = self.nodes[owner as usize].lock();
        Self::slice_mut(&mut st, addr.as_u64() / self.slice_size)
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
