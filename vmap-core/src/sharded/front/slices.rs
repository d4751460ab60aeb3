//! A node's slices: the owner table, a request clipped to one slice, allocation in a node's
//! slices, a new slice from the reserve, stealing from a neighbour, and empty slices given
//! back to the reserve.

use super::{NO_OWNER, NodeState, ShardedVmap, Slice, Space};
use crate::VirtAddr;
use crate::error::VmapError;
use crate::node::VecSource;
use crate::request::{AllocRequest, Fit};
use crate::space::VmapArea;
use crate::sync::atomic::{AtomicU16, Ordering};
use arch_api::sync::{MutexGuard, RawMutex};

impl<R: RawMutex, L> ShardedVmap<R, L> {
    /// The owner entry of the slice holding `addr`, if it is a whole slice.
    pub(super) fn owner_slot(&self, addr: u64) -> Option<&AtomicU16> {
        let idx = self.slice_of(addr).checked_sub(self.first_slice)?;
        self.owner.get(idx as usize)
    }

    /// The node owning the slice holding `addr`, or `NO_OWNER` (the
    /// reserve's, or outside every whole slice).
    #[inline]
    pub(super) fn owner_of(&self, addr: u64) -> u16 {
        self.owner_slot(addr)
            .map_or(NO_OWNER, |o| o.load(Ordering::Acquire))
    }

    /// Request clipped to one slice, or `None` if it cannot fit there.
    pub(super) fn clip(&self, req: &AllocRequest, fit: &Fit, index: u64) -> Option<AllocRequest> {
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

    pub(super) fn alloc_in_slices(
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

    pub(super) fn new_slice_space(&self, index: u64, node: u16) -> Result<Space, VmapError> {
        let s0 = index * self.slice_size;
        Ok(Space::new(
            VirtAddr::new(s0),
            VirtAddr::new(s0 + self.slice_size),
            self.page_size,
            VecSource::new(),
        )?
        .with_node_id(node))
    }

    pub(super) fn insert_slice(st: &mut NodeState<L>, sl: Slice) -> usize {
        let pos = st.slices.partition_point(|x| x.index < sl.index);
        st.slices.insert(pos, sl);
        pos
    }

    /// Takes a new slice from the reserve for node `st` (node lock held).
    pub(super) fn grow(
        &self,
        st: &mut NodeState<L>,
        req: &AllocRequest,
        fit: &Fit,
    ) -> Option<VmapArea> {
        self.grow_in(st, req, fit, self.reserve.lock())
    }

    /// [`grow`](Self::grow) with the reserve already locked.
    pub(super) fn grow_in(
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

    pub(super) fn slice_mut(st: &mut NodeState<L>, index: u64) -> Option<&mut Slice> {
        let pos = st.slices.binary_search_by_key(&index, |s| s.index).ok()?;
        Some(&mut st.slices[pos])
    }

    /// Steal from node `j` for node `i` (no lock held on entry).
    pub(super) fn steal(
        &self,
        i: usize,
        j: usize,
        req: &AllocRequest,
        fit: &Fit,
    ) -> Option<VmapArea> {
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

    /// Gives node `st`'s empty slices (no live nor parked area) back to the
    /// reserve (node lock held), so that requests spanning them, or larger
    /// than a quarter slice, can use their space again.
    pub(super) fn give_back_empty(&self, st: &mut NodeState<L>) {
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
}
