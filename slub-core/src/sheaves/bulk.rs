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
        // SAFETY: the caller holds `cpu`'s guard.
        let c = unsafe { self.line(slabs, cpu) };
        let mut n = 0;
        // SAFETY: under the guard of `cpu` the sheaves are ours; a count of
        // at most `cap` means a main sheaf whose first `size` slots hold
        // objects (`NO_SHEAF_SIZE`, without one, is refused here); sheaves
        // from the barn are ours.
        unsafe {
            loop {
                let size = c.size();
                if size <= self.cap() {
                    let k = size.min(out.len() - n);
                    let from = c.slot(size - k);
                    core::ptr::copy_nonoverlapping(from, out.as_mut_ptr().add(n), k);
                    c.set_size(size - k);
                    n += k;
                }
                if n == out.len() {
                    return n;
                }
                // Main is empty (or missing): the spare, else a full sheaf.
                let spare = c.spare.get();
                if !spare.is_null() && Sheaf::size(spare) > 0 {
                    let old = c.take_main();
                    c.put_main(spare);
                    c.spare.set(old);
                } else {
                    let empty = c.take_main();
                    if let Some(full) = self.barn.exchange_empty_for_full(empty) {
                        slabs.stat(cpu, StatItem::BarnGet);
                        c.put_main(full);
                    } else {
                        if !empty.is_null() {
                            c.put_main(empty);
                        }
                        return n;
                    }
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
        // SAFETY: the caller holds `cpu`'s guard.
        let c = unsafe { self.line(slabs, cpu) };
        let mut n = 0;
        // SAFETY: as in `take_main`; `NO_SHEAF_SIZE` leaves no room.
        unsafe {
            loop {
                let size = c.size();
                let room = self.cap().saturating_sub(size);
                let k = room.min(objs.len() - n);
                if k > 0 {
                    core::ptr::copy_nonoverlapping(objs.as_ptr().add(n), c.slot(size), k);
                    c.set_size(size + k);
                    n += k;
                }
                if n == objs.len() {
                    return n;
                }
                // Main is full (or missing): an empty spare, else swap a
                // full sheaf for an empty one at the barn.
                let spare = c.spare.get();
                if c.main().is_null() {
                    match self.barn.get_empty(slabs.pages()) {
                        Ok(s) => c.put_main(s),
                        Err(_) => return n,
                    }
                } else if !spare.is_null() && Sheaf::size(spare) == 0 {
                    let full = c.replace_main(spare);
                    c.spare.set(full);
                } else {
                    let full = c.take_main();
                    if let Some(e) = self.barn.exchange_full_for_empty(full, slabs.pages()) {
                        slabs.stat(cpu, StatItem::BarnPut);
                        c.put_main(e);
                    } else {
                        c.put_main(full);
                        return n;
                    }
                }
            }
        }
    }
}
