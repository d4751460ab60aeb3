//! `VmapSpace`: one virtual-address space `[start, end)` with its busy tree,
//! a [`FreeAreaSearch`] policy and a node source. This is the single-lock
//! allocator (Linux's `vmap_area_root` + `free_vmap_area_root` under
//! `vmap_area_lock`); callers wrap it in their lock, or use the
//! [`sharded`](crate::sharded) front.

use crate::VirtAddr;
use crate::busy::BusyIndex;
use crate::error::VmapError;
use crate::node::{NIL, NodeArena, NodeIdx, NodeSource, NodeTable};
use crate::policy::{BusyView, FreeAreaSearch};
use crate::request::AllocRequest;
#[cfg(feature = "stats")]
use crate::stats::VmapStats;

/// The errors of a space's constructor: `page_size` a power of two, `start`
/// and `end` multiples of it, `start < end`.
pub(crate) fn check_space(start: u64, end: u64, page_size: u64) -> Result<(), VmapError> {
    if !page_size.is_power_of_two() {
        return Err(VmapError::BadPageSize { page_size });
    }
    for (what, value) in [("start", start), ("end", end)] {
        if value & (page_size - 1) != 0 {
            return Err(VmapError::NotPageMultiple {
                what,
                value,
                page_size,
            });
        }
    }
    if start >= end {
        return Err(VmapError::EmptyRange {
            vstart: start,
            vend: end,
        });
    }
    Ok(())
}

/// A busy area `[va_start, va_end)` (Linux's `struct vmap_area`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmapArea {
    /// First byte.
    pub va_start: VirtAddr,
    /// One past the last byte.
    pub va_end: VirtAddr,
    /// The `vmap_node` that allocated it and to which it returns (0 for a
    /// plain [`VmapSpace`]).
    pub node: u16,
}

impl VmapArea {
    /// Size in bytes.
    pub const fn size(&self) -> u64 {
        self.va_end.as_u64() - self.va_start.as_u64()
    }
}

/// A virtual-address space handing out page-granular areas at the lowest
/// fitting address. `P` chooses the free-block search; `S` supplies tree
/// nodes.
pub struct VmapSpace<P: FreeAreaSearch, S: NodeSource> {
    start: u64,
    end: u64,
    page_size: u64,
    node_id: u16,
    busy: P::Busy,
    src: NodeTable<S>,
    policy: P,
    busy_bytes: u64,
    /// Areas parked by the sharded front: busy, but out of the busy tree
    /// (as Linux's pooled `vmap_area`s are out of `vn->busy.root`), linked
    /// through their `left`/`right` fields from `parked_head`.
    parked: usize,
    #[cfg(feature = "alloc")]
    parked_head: NodeIdx,
    #[cfg(feature = "stats")]
    stats: VmapStats,
}

impl<P: FreeAreaSearch, S: NodeSource> VmapSpace<P, S> {
    /// A space over `[start, end)` with pages of `page_size` bytes (a power
    /// of two; `start` and `end` multiples of it), drawing nodes from `src`.
    pub fn new(start: VirtAddr, end: VirtAddr, page_size: u64, src: S) -> Result<Self, VmapError> {
        let (start, end) = (start.as_u64(), end.as_u64());
        check_space(start, end, page_size)?;
        let mut src = NodeTable::new(src);
        let policy = P::init(&mut src, start, end)?;
        let busy = P::Busy::new(start, end, page_size)?;
        Ok(Self {
            start,
            end,
            page_size,
            node_id: 0,
            busy,
            src,
            policy,
            busy_bytes: 0,
            parked: 0,
            #[cfg(feature = "alloc")]
            parked_head: NIL,
            #[cfg(feature = "stats")]
            stats: VmapStats::default(),
        })
    }

    /// Sets the node id recorded in every area (for the sharded front).
    pub fn with_node_id(mut self, node: u16) -> Self {
        self.node_id = node;
        self
    }

    /// `alloc_vmap_area(size, align, vstart, vend)`: the lowest `a` in
    /// `[vstart, vend - size]` with `a % align == 0` that overlaps no busy area.
    pub fn alloc(
        &mut self,
        size: u64,
        align: u64,
        vstart: VirtAddr,
        vend: VirtAddr,
    ) -> Result<VmapArea, VmapError> {
        self.alloc_request(&AllocRequest::new(size, align, vstart, vend))
    }

    /// Allocates exactly `[addr, addr + size)` if all of it is free.
    pub fn alloc_exact(&mut self, addr: VirtAddr, size: u64) -> Result<VmapArea, VmapError> {
        self.alloc_request(&AllocRequest::exact(addr, size, self.page_size))
    }

    /// Allocates for a full request (phase, nocross, exact address).
    pub fn alloc_request(&mut self, req: &AllocRequest) -> Result<VmapArea, VmapError> {
        let fit = req.validate(self.start, self.end, self.page_size)?;
        let mut visited = 0;
        let a = if req.exact.is_some() {
            if !fit.accepts(fit.vstart)
                || !self.policy.find_exact(
                    &self.src,
                    &mut self.busy,
                    fit.vstart,
                    fit.size,
                    &mut visited,
                )
            {
                return Err(fit.no_space());
            }
            fit.vstart
        } else {
            match self
                .policy
                .find_fit(&self.src, &mut self.busy, &fit, &mut visited)
            {
                Some(a) => a,
                None => {
                    self.count_alloc(visited);
                    return Err(fit.no_space());
                }
            }
        };
        self.count_alloc(visited);
        let n = self.src.alloc_node().ok_or(VmapError::NodePoolExhausted)?;
        if let Err(e) = self.policy.claim(&mut self.src, a, fit.size, n) {
            self.src.free_node(n);
            return Err(e);
        }
        let node = self.src.node_mut(n);
        node.start = a;
        node.end = a + fit.size;
        node.parked = false;
        let linked = match self.policy.busy_pred(&self.src, n) {
            // A parked tile below is not in the busy tree: search instead.
            Some(pred) if pred == NIL || !self.src.node(pred).parked => {
                self.busy.insert_after(&mut self.src, pred, n)
            }
            _ => self.busy.insert(&mut self.src, n),
        };
        if let Err(e) = linked {
            // Only an index that is also the free index fails here (out
            // of memory for a node split), and its policy's `claim` took
            // nothing: the space is as it was.
            self.src.free_node(n);
            return Err(e);
        }
        self.busy_bytes += fit.size;
        self.debug_check();
        Ok(self.area(a, a + fit.size))
    }

    #[inline]
    fn area(&self, start: u64, end: u64) -> VmapArea {
        VmapArea {
            va_start: VirtAddr::new(start),
            va_end: VirtAddr::new(end),
            node: self.node_id,
        }
    }

    #[inline]
    #[allow(unused_variables)]
    fn count_alloc(&mut self, visited: u32) {
        #[cfg(feature = "stats")]
        self.stats.record_alloc(visited);
    }

    /// The busy area containing `addr` (`find_vmap_area`).
    pub fn find(&self, addr: VirtAddr) -> Option<VmapArea> {
        let mut v = 0;
        let i = self.busy.floor(&self.src, addr.as_u64(), &mut v);
        if i == NIL {
            return None;
        }
        let n = self.src.node(i);
        (addr.as_u64() < n.end && !n.parked).then(|| self.area(n.start, n.end))
    }

    /// vfree's lookup: finds the area starting at `addr` and unlinks it in
    /// ONE tree search (Linux 6.0 `find_unlink_vmap_area`), then gives its
    /// range back to the free space. Unknown address or double free:
    /// [`VmapError::NotFound`], nothing changed.
    pub fn find_unlink(&mut self, addr: VirtAddr) -> Result<VmapArea, VmapError> {
        let i = self.search_busy(addr.as_u64())?;
        self.unlink_node(i)
    }

    /// The busy (not parked) area starting at `a`: one counted search.
    #[inline]
    fn search_busy(&mut self, a: u64) -> Result<NodeIdx, VmapError> {
        self.search_busy_in(a, false)
    }

    /// [`search_busy`](Self::search_busy), `in_run` for the next address
    /// of a batch in address order (see `BusyIndex::find_start_in_run`).
    #[inline(always)]
    fn search_busy_in(&mut self, a: u64, in_run: bool) -> Result<NodeIdx, VmapError> {
        let mut v = 0;
        let i = if in_run {
            self.busy.find_start_in_run(&self.src, a, &mut v)
        } else {
            self.busy.find_start_for_unlink(&self.src, a, &mut v)
        };
        self.count_free_search();
        if i == NIL || self.src.node(i).parked {
            return Err(VmapError::NotFound { addr: a });
        }
        Ok(i)
    }

    /// [`find_unlink`](Self::find_unlink) for each of `addrs`, reporting each
    /// outcome to `done` (an error leaves that address's state unchanged and
    /// the batch goes on). Meant for purging lazily freed areas: when an
    /// address is that of the next busy area after the one just unlinked
    /// (ascending runs, as lazy areas mostly are), no tree search is made:
    /// the policy's neighbour links name it, or under `Blocks` the way down
    /// its removal kept (a run of 64 among 10 000 areas: 165 -> 85 ns an
    /// area, BENCHMARKS.md session 25).
    pub fn find_unlink_batch(
        &mut self,
        addrs: impl IntoIterator<Item = VirtAddr>,
        mut done: impl FnMut(VirtAddr, Result<VmapArea, VmapError>),
    ) {
        let mut next = NIL;
        for addr in addrs {
            let a = addr.as_u64();
            let found = if next != NIL && self.src.node(next).start == a {
                if self.src.node(next).parked {
                    Err(VmapError::NotFound { addr: a })
                } else {
                    Ok(next)
                }
            } else {
                self.search_busy_in(a, true)
            };
            let i = match found {
                Ok(i) => i,
                Err(e) => {
                    next = NIL;
                    done(addr, Err(e));
                    continue;
                }
            };
            // Busy nodes other than `i` survive the unlink, so this stays
            // valid for the next address.
            next = self.policy.busy_after(&self.src, i).unwrap_or(NIL);
            done(addr, self.unlink_node_in(i, true));
        }
    }

    /// Resizes the busy area starting at `addr` in place to `size` bytes
    /// (vrealloc's growth into free space after it): the area is unlinked
    /// and the exact range `[addr, addr + size)` taken again, so growing
    /// succeeds only if the range after it is free. On any error (unknown
    /// area, range taken, outside the space, no memory for the policy's
    /// index: `NodePoolExhausted`) nothing changed: the old range is taken
    /// back, which cannot fail since it was just freed and the memory to
    /// link it again was reserved before it was unlinked.
    pub fn resize(&mut self, addr: VirtAddr, size: u64) -> Result<VmapArea, VmapError> {
        let req = AllocRequest::exact(addr, size, self.page_size);
        req.validate(self.start, self.end, self.page_size)?;
        let i = self.search_busy(addr.as_u64())?;
        // Taking the old range back must not need memory the heap may
        // refuse (a split of `Blocks`' tree), or the area would be lost.
        self.busy.reserve_insert()?;
        let old = self.unlink_node(i)?;
        match self.alloc_request(&req) {
            Ok(a) => Ok(a),
            Err(e) => {
                let back = AllocRequest::exact(addr, old.size(), self.page_size);
                let r = self.alloc_request(&back);
                debug_assert!(r.is_ok(), "the range just freed is free: {r:?}");
                Err(e)
            }
        }
    }

    /// Same as [`find_unlink`](Self::find_unlink).
    pub fn free(&mut self, addr: VirtAddr) -> Result<VmapArea, VmapError> {
        self.find_unlink(addr)
    }

    /// The pre-2022 vfree, kept for comparison (`harness vfree-search`):
    /// look the area up, then search again to unlink it — two tree searches
    /// (feature `testing`: a baseline, not part of the API).
    #[cfg(feature = "testing")]
    pub fn free_two_search(&mut self, addr: VirtAddr) -> Result<VmapArea, VmapError> {
        self.search_busy(addr.as_u64())?;
        // The second search, as `__free_vmap_area` did by address (found
        // and live already: no second check).
        let mut v = 0;
        let j = self.busy.find_start(&self.src, addr.as_u64(), &mut v);
        self.count_free_search();
        self.unlink_node(j)
    }

    /// Unlinks busy node `i` and gives its range back to the free space;
    /// refused (nothing changed) if the policy cannot get the nodes the
    /// release may need.
    fn unlink_node(&mut self, i: NodeIdx) -> Result<VmapArea, VmapError> {
        self.unlink_node_in(i, false)
    }

    /// [`unlink_node`](Self::unlink_node), `in_run` when it is one of a
    /// batch of unlinks in address order.
    #[inline(always)]
    fn unlink_node_in(&mut self, i: NodeIdx, in_run: bool) -> Result<VmapArea, VmapError> {
        let (start, end) = (self.src.node(i).start, self.src.node(i).end);
        self.policy.prepare_release(&mut self.src, start, end)?;
        let prev = if self.policy.wants_prev() {
            self.busy.prev(&self.src, i)
        } else {
            NIL
        };
        if in_run {
            self.busy.remove_in_run(&mut self.src, i);
        } else {
            self.busy.remove(&mut self.src, i);
        }
        Ok(self.give_back(i, start, end, prev))
    }

    /// Gives the range of busy node `i`, out of the busy tree, back to the
    /// free space (`prev`: its busy predecessor if the policy wants it).
    fn give_back(&mut self, i: NodeIdx, start: u64, end: u64, prev: NodeIdx) -> VmapArea {
        if !self.policy.release(&mut self.src, start, end, prev, i) {
            self.src.free_node(i);
        }
        self.busy_bytes -= end - start;
        self.debug_check();
        self.area(start, end)
    }

    #[inline]
    fn count_free_search(&mut self) {
        #[cfg(feature = "stats")]
        self.stats.record_free_search();
    }

    #[cfg(feature = "alloc")]
    /// The live (busy, not parked) area starting at `addr`: its node and its
    /// size in bytes, in one counted search (the sharded front's free, which
    /// then parks or unlinks that node without searching again); `in_run`:
    /// the next address of a batch in address order.
    #[inline]
    pub(crate) fn live_at(&mut self, addr: u64, in_run: bool) -> Result<(NodeIdx, u64), VmapError> {
        let i = self.search_busy_in(addr, in_run)?;
        let n = self.src.node(i);
        Ok((i, n.end - n.start))
    }

    #[cfg(feature = "alloc")]
    /// Parks live node `i` (from [`live_at`](Self::live_at)): the area stays
    /// allocated but `find`/`free` do not see it (the sharded front's
    /// per-node pools). Under a policy that allows it
    /// (`PARK_OUTSIDE_BUSY_TREE`) it leaves the busy tree, so searches do
    /// not pay for parked areas; otherwise it stays there, flagged.
    #[inline(always)]
    pub(crate) fn park_node(&mut self, i: NodeIdx) -> VmapArea {
        if P::PARK_OUTSIDE_BUSY_TREE {
            self.busy.remove(&mut self.src, i);
            let head = self.parked_head;
            if head != NIL {
                self.src.node_mut(head).left = i;
            }
            let n = self.src.node_mut(i);
            n.left = NIL;
            n.right = head;
            self.parked_head = i;
        }
        let n = self.src.node_mut(i);
        n.parked = true;
        let (start, end) = (n.start, n.end);
        self.parked += 1;
        self.area(start, end)
    }

    #[cfg(feature = "alloc")]
    /// Clears parked node `i`'s flag and, outside the busy tree, takes it
    /// off the parked list.
    #[inline(always)]
    fn unlink_parked(&mut self, i: NodeIdx) {
        let n = self.src.node_mut(i);
        n.parked = false;
        let (l, r) = (n.left, n.right);
        self.parked -= 1;
        if !P::PARK_OUTSIDE_BUSY_TREE {
            return;
        }
        if l == NIL {
            self.parked_head = r;
        } else {
            self.src.node_mut(l).right = r;
        }
        if r != NIL {
            self.src.node_mut(r).left = l;
        }
    }

    #[cfg(feature = "alloc")]
    /// Frees live node `i` (from [`live_at`](Self::live_at)) for real (out
    /// of line: the sharded front's pooled free stays small); `in_run`: one
    /// of a batch of frees in address order.
    #[inline(never)]
    pub(crate) fn unlink_live(&mut self, i: NodeIdx, in_run: bool) -> Result<VmapArea, VmapError> {
        self.unlink_node_in(i, in_run)
    }

    #[cfg(feature = "alloc")]
    /// Areas parked in this space.
    pub(crate) fn parked(&self) -> usize {
        self.parked
    }

    #[cfg(feature = "alloc")]
    /// Changes the node id recorded in areas (an empty slice changing owner).
    pub(crate) fn set_node_id(&mut self, node: u16) {
        self.node_id = node;
    }

    #[cfg(feature = "alloc")]
    /// Makes a parked area live again (back into the busy tree if it left).
    #[inline(always)]
    pub(crate) fn unpark(&mut self, i: NodeIdx) -> VmapArea {
        self.unlink_parked(i);
        if P::PARK_OUTSIDE_BUSY_TREE {
            // Such a policy's index is the busy tree, which takes any node.
            let r = self.busy.insert(&mut self.src, i);
            debug_assert!(r.is_ok(), "the busy tree does not fail");
        }
        let n = self.src.node(i);
        self.area(n.start, n.end)
    }

    #[cfg(feature = "alloc")]
    /// Frees a parked area for real. Only the sharded front parks, over the
    /// default policy, whose frees never need a node: cannot fail there.
    pub(crate) fn release_parked(&mut self, i: NodeIdx) {
        if !P::PARK_OUTSIDE_BUSY_TREE {
            self.unlink_parked(i);
            let r = self.unlink_node(i);
            debug_assert!(r.is_ok(), "the default policy frees without nodes");
            if r.is_err() {
                // Keep it parked rather than lose track of it.
                self.src.node_mut(i).parked = true;
                self.parked += 1;
            }
            return;
        }
        let (start, end) = (self.src.node(i).start, self.src.node(i).end);
        let r = self.policy.prepare_release(&mut self.src, start, end);
        debug_assert!(r.is_ok(), "the default policy frees without nodes");
        if r.is_err() {
            // Keep it parked rather than lose track of it.
            return;
        }
        self.unlink_parked(i);
        // Such a policy ignores `prev` (see `PARK_OUTSIDE_BUSY_TREE`).
        self.give_back(i, start, end, NIL);
    }

    /// Live areas in address order (for vmallocinfo).
    pub fn iter(&self) -> Iter<'_, P, S> {
        Iter {
            space: self,
            next: self.busy.first(&self.src),
        }
    }

    /// Number of live areas (parked ones excluded).
    pub fn len(&self) -> usize {
        if P::PARK_OUTSIDE_BUSY_TREE {
            self.busy.len()
        } else {
            self.busy.len() - self.parked
        }
    }

    /// Whether no area is allocated (nor parked).
    pub fn is_empty(&self) -> bool {
        self.busy.len() == 0 && self.parked == 0
    }

    /// Bytes in busy (including parked) areas.
    pub fn busy_bytes(&self) -> u64 {
        self.busy_bytes
    }

    /// Bytes not in any area.
    pub fn free_bytes(&self) -> u64 {
        self.end - self.start - self.busy_bytes
    }

    /// First address of the space.
    pub fn start(&self) -> VirtAddr {
        VirtAddr::new(self.start)
    }

    /// One past the last address of the space.
    pub fn end(&self) -> VirtAddr {
        VirtAddr::new(self.end)
    }

    /// The page size.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// The node id recorded in areas.
    pub fn node_id(&self) -> u16 {
        self.node_id
    }

    /// Tree nodes currently taken from the source.
    pub fn nodes_in_use(&self) -> usize {
        self.src.in_use()
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &'static str {
        P::NAME
    }

    /// Counters (feature `stats`).
    #[cfg(feature = "stats")]
    pub fn stats(&self) -> &VmapStats {
        &self.stats
    }

    /// Resets the counters (feature `stats`).
    #[cfg(feature = "stats")]
    pub fn reset_stats(&mut self) {
        self.stats = VmapStats::default();
    }

    /// Checks every invariant: trees ordered and balanced, augmented values
    /// correct, free + busy exactly tile the space, byte and node accounting.
    pub fn check_invariants(&self) -> Result<(), &'static str> {
        let n = self.busy.check(&self.src)?;
        let mut bytes = 0;
        let mut i = self.busy.first(&self.src);
        while i != NIL {
            let node = self.src.node(i);
            if node.start < self.start || node.end > self.end {
                return Err("busy area outside the space");
            }
            if P::PARK_OUTSIDE_BUSY_TREE && node.parked {
                return Err("parked area in the busy tree");
            }
            bytes += node.end - node.start;
            i = self.busy.next(&self.src, i);
        }
        #[cfg(feature = "alloc")]
        let parked = {
            let mut list = alloc::vec::Vec::new();
            let (mut i, mut last) = (self.parked_head, NIL);
            while i != NIL && list.len() <= self.parked {
                let node = self.src.node(i);
                if !node.parked || node.left != last {
                    return Err("parked list broken");
                }
                bytes += node.end - node.start;
                list.push(i);
                (last, i) = (i, node.right);
            }
            list.sort_unstable_by_key(|&j| self.src.node(j).start);
            list
        };
        #[cfg(not(feature = "alloc"))]
        let parked: [NodeIdx; 0] = [];
        if bytes != self.busy_bytes {
            return Err("busy byte count mismatch");
        }
        if P::PARK_OUTSIDE_BUSY_TREE {
            if parked.len() != self.parked {
                return Err("parked count mismatch");
            }
        } else if n < self.parked || !parked.is_empty() {
            return Err("parked count mismatch");
        }
        let busy = BusyView {
            tree: &self.busy,
            parked: &parked,
        };
        self.policy.check(&self.src, &busy, self.start, self.end)
    }

    #[inline]
    fn debug_check(&self) {
        #[cfg(feature = "debug")]
        if let Err(e) = self.check_invariants() {
            panic!("vmap-core invariant broken: {e}");
        }
    }
}

/// Iterator over live areas in address order.
pub struct Iter<'a, P: FreeAreaSearch, S: NodeSource> {
    space: &'a VmapSpace<P, S>,
    next: NodeIdx,
}

impl<P: FreeAreaSearch, S: NodeSource> Iterator for Iter<'_, P, S> {
    type Item = VmapArea;

    fn next(&mut self) -> Option<VmapArea> {
        loop {
            if self.next == NIL {
                return None;
            }
            let sp = self.space;
            let i = self.next;
            self.next = sp.busy.next(&sp.src, i);
            let n = sp.src.node(i);
            if !n.parked {
                return Some(sp.area(n.start, n.end));
            }
        }
    }
}
