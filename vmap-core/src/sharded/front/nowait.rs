//! The sharded front's non-blocking allocation (Linux's `GFP_NOWAIT`,
//! [`VmapNodes::try_alloc_on`](crate::VmapNodes::try_alloc_on)): every lock
//! is tried, none is waited for.
//!
//! A small request takes, on its own node if that lock is free, a pooled
//! area, the lowest fit in its slices or a new slice (if the reserve's lock
//! is free too): steps 1 to 3 of the module docs. Failing that (contended,
//! or no room), it carves from the slices of the other nodes whose locks
//! are free, as step 5 does. Large and exact requests try the reserve. No
//! pool is drained and no slice is given back or stolen: those are the slow
//! path's, which waits. So a request that finds nothing fails with
//! `NoSpace` where a blocking one might still succeed, or with
//! `WouldBlock` when some lock it skipped might have held room.

use super::{Fit, ShardedVmap};
use crate::error::VmapError;
use crate::request::AllocRequest;
use crate::space::VmapArea;
use arch_api::sync::RawMutex;

impl<R: RawMutex, L> ShardedVmap<R, L> {
    /// See the file docs; `publish` runs under the lock of the node the
    /// area is recorded on.
    pub(super) fn try_alloc(
        &self,
        node: usize,
        req: &AllocRequest,
        publish: impl FnOnce(&mut L, &VmapArea),
    ) -> Result<VmapArea, VmapError> {
        let fit = req.validate(self.start, self.end, self.page_size)?;
        if req.exact.is_some() || fit.size > self.slice_size / 4 {
            return self.try_alloc_reserve(req, &fit, publish);
        }
        let nr = self.nodes.len();
        let i = node % nr;
        let mut contended = false;
        match self.nodes[i].try_lock() {
            Some(mut g) => {
                let st = &mut *g;
                let mut got = self.take_pooled(st, &fit);
                if got.is_none() {
                    got = self.alloc_in_slices(st, req, &fit);
                }
                if got.is_none() {
                    match self.reserve.try_lock() {
                        Some(r) => got = self.grow_in(st, req, &fit, r),
                        None => contended = true,
                    }
                }
                if let Some(a) = got {
                    publish(&mut st.lazy, &a);
                    return Ok(a);
                }
            }
            None => contended = true,
        }
        for k in 1..nr {
            let Some(mut g) = self.nodes[(i + k) % nr].try_lock() else {
                contended = true;
                continue;
            };
            let st = &mut *g;
            if let Some(a) = self.alloc_in_slices(st, req, &fit) {
                publish(&mut st.lazy, &a);
                return Ok(a);
            }
        }
        Err(if contended {
            VmapError::WouldBlock
        } else {
            fit.no_space()
        })
    }

    /// A large or exact request in the reserve; the area carries the
    /// reserve's id, and a caller keeping per-node records files it under
    /// node `reserve_id % nr_nodes`, whose lock is tried while the reserve's
    /// is held (a try cannot deadlock against the usual node-then-reserve
    /// order).
    fn try_alloc_reserve(
        &self,
        req: &AllocRequest,
        fit: &Fit,
        publish: impl FnOnce(&mut L, &VmapArea),
    ) -> Result<VmapArea, VmapError> {
        let mut reserve = self.reserve.try_lock().ok_or(VmapError::WouldBlock)?;
        let home = usize::from(self.reserve_id()) % self.nodes.len();
        let mut st = self.nodes[home].try_lock().ok_or(VmapError::WouldBlock)?;
        let a = reserve.alloc_request(req).map_err(|e| match e {
            // An exact range inside a node's slice is busy to the reserve.
            VmapError::OutsideSpace { .. } => fit.no_space(),
            e => e,
        })?;
        publish(&mut st.lazy, &a);
        Ok(a)
    }
}
