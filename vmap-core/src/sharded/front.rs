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
//! **Placement guarantee.** Every area lies in `[vstart, vend)`, satisfies
//! `align`, `phase` and `nocross`, and overlaps no other live area. Within
//! the slice (or reserve) it was carved from, it is the lowest fit. It is
//! NOT the lowest fit of the whole space: another node's slice, or the pool
//! (which reuses a recently freed area of the same size), may give a higher
//! address. An exact request spanning two slices fails with `NoSpace`.
//!
//! Locks: a node lock may be held while the reserve lock is taken; never two
//! node locks at once.

use super::VmapNodes;
use super::pool::{Pool, PoolEntry};
use crate::VirtAddr;
use crate::error::VmapError;
use crate::node::VecSource;
use crate::policy::Augmented;
use crate::request::{AllocRequest, Fit};
use crate::space::{VmapArea, VmapSpace};
use crate::sync::atomic::{AtomicU16, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;
use arch_api::sync::{DefaultRawMutex, Mutex, RawMutex};

/// No node owns the slice: the reserve does.
const NO_OWNER: u16 = u16::MAX;

type Space = VmapSpace<Augmented, VecSource>;

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
        let ss = self.slice_size;
        let lo = (fit.vstart / ss * ss).max(self.start);
        let hi = fit.vend.div_ceil(ss).saturating_mul(ss).min(self.end);
        let mut reserve = self.reserve.lock();
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

    /// Drains node `node`'s pool.
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
        Self::drain_locked(&mut self.nodes[node].lock());
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
        let nr = self.nodes.len();
        let i = node % nr;
        if let Some(a) = req.exact {
            let owner = self
                .owner_slot(a.as_u64())
                .map_or(NO_OWNER, |o| o.load(Ordering::Acquire));
            if owner != NO_OWNER {
                let mut st = self.nodes[owner as usize].lock();
                let index = a.as_u64() / self.slice_size;
                return match Self::slice_mut(&mut st, index) {
                    Some(sl) => sl.space.alloc_request(req).map_err(|e| match e {
                        VmapError::OutsideSpace { .. } => fit.no_space(),
                        e => e,
                    }),
                    None => Err(fit.no_space()),
                };
            }
            return self.reserve.lock().alloc_request(req);
        }
        if fit.size <= self.slice_size / 4 {
            let mut guard = self.nodes[i].lock();
            let st = &mut *guard;
            if let Some(a) = self.take_pooled(st, &fit) {
                return Ok(a);
            }
            if let Some(a) = self.alloc_in_slices(st, req, &fit) {
                return Ok(a);
            }
            if let Some(a) = self.grow(st, req, &fit) {
                return Ok(a);
            }
            if st.pool.len() > 0 {
                Self::drain_locked(st);
                if let Some(a) = self.alloc_in_slices(st, req, &fit) {
                    return Ok(a);
                }
            }
            drop(guard);
            for k in 1..nr {
                if let Some(a) = self.steal(i, (i + k) % nr, req, &fit) {
                    return Ok(a);
                }
            }
        }
        self.reserve.lock().alloc_request(req)
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

    fn drain_pools(&self) {
        for i in 0..self.nodes.len() {
            self.drain_pool(i);
        }
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
