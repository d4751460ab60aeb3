//! The sheaves front's part of `kmalloc_nolock` / `kfree_nolock`: the main
//! sheaf under [`CpuLocal::try_pin_nolock`], Linux's `local_trylock` on the
//! per-CPU sheaves. Only a pop from (a push onto) the main sheaf: no spare
//! swap, no barn (its lock), no refill; `None` / `false` sends the caller to
//! the tid front's lockless paths.

use super::SheafFront;
use crate::cpu_local::CpuLocal;
use crate::page_source::PageSource;
use crate::slabs::Slabs;
use arch_api::DwCas;
use arch_api::sync::RawMutex;

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> SheafFront<P, C, D, R> {
    /// An object from the current CPU's main sheaf, if the backend can pin
    /// from this context and the sheaf has one.
    #[inline(always)]
    pub(crate) fn alloc_nolock(&self, slabs: &Slabs<P, C, D, R>) -> Option<usize> {
        let (_g, cpu) = slabs.cpus().try_pin_nolock()?;
        // SAFETY: the guard pins us to `cpu`, and (its contract) the code
        // we may have interrupted is not inside a section on `cpu`.
        unsafe { self.sheaf_pop(slabs, cpu) }
    }

    /// Pushes `p` (checked by the caller) onto the current CPU's main sheaf;
    /// `false` if the backend cannot pin from this context or the sheaf is
    /// full (or missing).
    #[inline(always)]
    pub(crate) fn free_nolock(&self, slabs: &Slabs<P, C, D, R>, p: usize) -> bool {
        let Some((_g, cpu)) = slabs.cpus().try_pin_nolock() else {
            return false;
        };
        // SAFETY: as in `alloc_nolock`; `p` is an object being freed.
        unsafe { self.sheaf_push(slabs, cpu, p) }
    }
}
