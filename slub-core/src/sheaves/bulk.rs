//! Bulk operations on the sheaves front: whole runs copied out of and into
//! the main sheaf (Linux's `alloc_from_pcs_bulk` / `free_to_pcs_bulk`); what
//! the sheaf cannot take or give goes through the tid front's bulk paths.

use super::SheafFront;
use crate::barn::Sheaf;
use crate::cpu_local::CpuLocal;
use crate::page_source::PageSource;
use arch_api::DwCas;
use arch_api::sync::RawMutex;

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> SheafFront<P, C, D, R> {
    /// Pops up to `out.len()` objects off CPU `cpu`'s main sheaf into the
    /// front of `out`; returns how many.
    ///
    /// # Safety
    /// The caller holds the guard of `cpu`.
    pub(crate) unsafe fn take_main(&self, cpu: usize, out: &mut [usize]) -> usize {
        let c = self.cpu.get(cpu);
        // SAFETY: under the guard of `cpu` the sheaves are ours; `main` is a
        // live sheaf whose first `size` slots hold objects, or the stand-in,
        // whose size (above every capacity) is refused here.
        unsafe {
            let main = c.main.get();
            let size = Sheaf::size(main);
            if size > self.cap() {
                return 0;
            }
            let k = size.min(out.len());
            let from = Sheaf::slot(main, size - k);
            core::ptr::copy_nonoverlapping(from, out.as_mut_ptr(), k);
            Sheaf::set_size(main, size - k);
            k
        }
    }

    /// Pushes the objects of `objs` onto CPU `cpu`'s main sheaf while it has
    /// room; returns how many (taken from the front of `objs`).
    ///
    /// # Safety
    /// The caller holds the guard of `cpu`; `objs` are objects of this cache
    /// being freed.
    pub(crate) unsafe fn put_main(&self, cpu: usize, objs: &[usize]) -> usize {
        let c = self.cpu.get(cpu);
        // SAFETY: as in `take_main`; the stand-in's size leaves no room.
        unsafe {
            let main = c.main.get();
            let size = Sheaf::size(main);
            let room = self.cap().saturating_sub(size);
            let k = room.min(objs.len());
            if k == 0 {
                return 0;
            }
            core::ptr::copy_nonoverlapping(objs.as_ptr(), Sheaf::slot(main, size), k);
            Sheaf::set_size(main, size + k);
            k
        }
    }
}
