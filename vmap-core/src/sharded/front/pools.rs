//! The front's side of the per-node pools of recently freed areas: taking a pooled area and
//! draining a node's pool (with the broken two-phase variants the loom models check).

use super::{NodeState, ShardedVmap};
use crate::request::Fit;
use crate::space::VmapArea;
use arch_api::sync::RawMutex;
#[cfg(kmm_loom)]
use {super::NO_OWNER, crate::VirtAddr, crate::sync::atomic::Ordering, alloc::vec::Vec};

impl<R: RawMutex, L> ShardedVmap<R, L> {
    pub(super) fn take_pooled(&self, st: &mut NodeState<L>, fit: &Fit) -> Option<VmapArea> {
        let c = st.pool.class(fit.size >> self.page_shift)?;
        let e = st.pool.take(c, |a| fit.accepts(a))?;
        let sl = Self::slice_mut(st, e.slice)?;
        Some(sl.space.unpark(e.node))
    }

    pub(super) fn drain_locked(st: &mut NodeState<L>) {
        for e in st.pool.take_all() {
            if let Some(sl) = Self::slice_mut(st, e.slice) {
                sl.space.release_parked(e.node);
            }
        }
    }

    /// [`drain_pool`](Self::drain_pool) on every node.
    pub(super) fn drain_all(&self) {
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
}
