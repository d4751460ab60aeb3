//! Bulk operations on the sheaves front (Linux's `alloc_from_pcs_bulk` /
//! `free_to_pcs_bulk`): whole runs copied out of and into the main sheaf,
//! which is exchanged with the spare and with the barn as it empties or
//! fills, as the single-object slow paths do. What the sheaves cannot take
//! or give goes through the tid front's bulk paths.

use super::SheafFront;
use crate::barn::Sheaf;
use crate::cpu_local::CpuLocal;
use crate::page_source::PageSource;
use crate::slabs::Slabs;
use crate::stats::StatItem;
use arch_api::DwCas;
use arch_api::sync::RawMutex;

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> SheafFront<P, C, D, R> {
    /// Pops up to `out.len()` objects off CPU `cpu`'s sheaves (main, then
    /// the spare, then full sheaves from the barn) into the front of `out`;
    /// returns how many.
    ///
    /// # Safety
    /// The caller holds the guard of `cpu`.
    pub(crate) unsafe fn take_main(
        &self,
        slabs: &Slabs<P, C, D, R>,
        cpu: usize,
        out: &mut [usize],
    ) -> usize {
        let c = self.cpu.get(cpu);
        let mut n = 0;
        // SAFETY: under the guard of `cpu` the sheaves are ours; `main` is a
        // live sheaf whose first `size` slots hold objects, or the stand-in,
        // whose size (above every capacity) is refused here; sheaves from
        // the barn are ours.
        unsafe {
            loop {
                let main = c.main.get();
                let size = Sheaf::size(main);
                if size <= self.cap() {
                    let k = size.min(out.len() - n);
                    let from = Sheaf::slot(main, size - k);
                    core::ptr::copy_nonoverlapping(from, out.as_mut_ptr().add(n), k);
                    Sheaf::set_size(main, size - k);
                    n += k;
                }
                if n == out.len() {
                    return n;
                }
                // Main is empty (or missing): the spare, else a full sheaf.
                let main = c.main_sheaf();
                let spare = c.spare.get();
                if !spare.is_null() && Sheaf::size(spare) > 0 {
                    c.main.set(spare);
                    c.spare.set(main);
                } else if let Some(full) = self.barn.exchange_empty_for_full(main) {
                    slabs.stat(cpu, StatItem::BarnGet);
                    c.main.set(full);
                } else {
                    return n;
                }
            }
        }
    }

    /// Pushes the objects of `objs` onto CPU `cpu`'s sheaves (main, then an
    /// empty spare, then empty sheaves from the barn for full ones) while
    /// they have room; returns how many (taken from the front of `objs`).
    ///
    /// # Safety
    /// The caller holds the guard of `cpu`; `objs` are objects of this cache
    /// being freed.
    pub(crate) unsafe fn put_main(
        &self,
        slabs: &Slabs<P, C, D, R>,
        cpu: usize,
        objs: &[usize],
    ) -> usize {
        let c = self.cpu.get(cpu);
        let mut n = 0;
        // SAFETY: as in `take_main`; the stand-in's size leaves no room.
        unsafe {
            loop {
                let main = c.main.get();
                let size = Sheaf::size(main);
                let room = self.cap().saturating_sub(size);
                let k = room.min(objs.len() - n);
                if k > 0 {
                    core::ptr::copy_nonoverlapping(
                        objs.as_ptr().add(n),
                        Sheaf::slot(main, size),
                        k,
                    );
                    Sheaf::set_size(main, size + k);
                    n += k;
                }
                if n == objs.len() {
                    return n;
                }
                // Main is full (or missing): an empty spare, else swap a
                // full sheaf for an empty one at the barn.
                let main = c.main_sheaf();
                let spare = c.spare.get();
                if main.is_null() {
                    match self.barn.get_empty(slabs.pages()) {
                        Ok(s) => c.main.set(s),
                        Err(_) => return n,
                    }
                } else if !spare.is_null() && Sheaf::size(spare) == 0 {
                    c.spare.set(main);
                    c.main.set(spare);
                } else if let Some(e) = self.barn.exchange_full_for_empty(main, slabs.pages()) {
                    slabs.stat(cpu, StatItem::BarnPut);
                    c.main.set(e);
                } else {
                    return n;
                }
            }
        }
    }
}
