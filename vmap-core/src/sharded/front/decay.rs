//! Pool decay: parked areas go back to the free space a quarter per purge,
//! so that a node that stops allocating does not keep its pooled areas,
//! and the slices they kept, for ever (see
//! [`VmapNodes::decay_pools`](crate::VmapNodes::decay_pools)).

use super::ShardedVmap;
use alloc::vec::Vec;
use arch_api::sync::RawMutex;

impl<R: RawMutex, L> ShardedVmap<R, L> {
    /// [`VmapNodes::decay_pools`](crate::VmapNodes::decay_pools): each
    /// node, one lock acquisition at a time.
    pub fn decay(&self, full: bool) {
        let mut out = Vec::new();
        for m in self.nodes.iter() {
            #[cfg(kmm_loom)]
            if crate::loom_mutation::MUTATION.active(crate::loom_mutation::DECAY_TWO_PHASE) {
                // Broken variant (loom_pool_decay_broken): the entries to
                // release are read under one acquisition of the node's
                // lock and released, and taken out of the pool, under a
                // second; an allocation in between may have taken one of
                // them back (it is live now) and the pool's front is then
                // another entry.
                let picked = m.lock().pool.peek_decay(full);
                let mut st = m.lock();
                st.pool.decay(full, |_| {});
                for e in picked {
                    if let Some(sl) = Self::slice_mut(&mut st, e.slice) {
                        sl.space.release_parked(e.node);
                    }
                }
                continue;
            }
            let mut st = m.lock();
            if st.pool.len() == 0 {
                continue;
            }
            st.pool.decay(full, |e| out.push(e));
            for e in out.drain(..) {
                if let Some(sl) = Self::slice_mut(&mut st, e.slice) {
                    sl.space.release_parked(e.node);
                }
            }
            self.give_back_empty(&mut st);
        }
    }
}
