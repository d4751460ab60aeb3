//! The kmalloc leaf's own line: what [`Kmalloc::try_alloc_class`] and
//! [`Kmalloc::try_free_class`] read besides the class's sheaves line, the
//! same for every class: whether the leaf may run, the CPUs and where the
//! sheaves area is. Read from each class's `KmemCache` instead, these were
//! two lines per class (its `leaf` byte and its CPUs), and in a program
//! whose own data keeps evicting them (`malloc-bench`'s alloc-test) a
//! `malloc` waited on them more than on anything else (BENCHMARKS.md,
//! session 20); this line stays hot because every class uses it.
//!
//! [`Kmalloc::try_alloc_class`]: super::Kmalloc::try_alloc_class
//! [`Kmalloc::try_free_class`]: super::Kmalloc::try_free_class

use crate::sheaves::Heads;
use arch_api::{CpuLocal, LocalOp};
use core::sync::atomic::{AtomicBool, Ordering};

/// One cache line (more if the backend's CPUs are bigger).
#[repr(C, align(64))]
pub(super) struct LeafLine<C> {
    /// Every cache runs the sheaves front's bare leaf (each one's `leaf`
    /// byte is on, no `debug`) and the backend has guard-free steps.
    on: AtomicBool,
    /// Column 0 of the caches' sheaves area (meaningless while `on` is
    /// false).
    area: Heads,
    /// A clone of the caches' CPUs (clones share their guards).
    cpus: C,
}

// SAFETY: `area` only locates the sheaves area, which is shared by design
// (`SheafArea` is `Send` and `Sync`: its lines are reached through the
// backend's steps and guards); the rest is an atomic and the CPUs.
unsafe impl<C: Send> Send for LeafLine<C> {}
// SAFETY: as above.
unsafe impl<C: Sync> Sync for LeafLine<C> {}

impl<C: CpuLocal> LeafLine<C> {
    /// The line of caches whose leaves are all on (`on`), whose sheaves
    /// area's column 0 is `area`.
    pub(super) fn new(cpus: C, area: Option<Heads>, on: bool) -> Self {
        let area = area.filter(|_| on && !C::HAS_PINNED_CPU && cfg!(not(feature = "debug")));
        Self {
            on: AtomicBool::new(area.is_some()),
            area: area.unwrap_or(Heads::NONE),
            cpus,
        }
    }

    /// Turns the leaf off (a cache is destroyed: it may no longer run).
    pub(super) fn turn_off(&mut self) {
        *self.on.get_mut() = false;
    }

    /// Pops an object of class `i` from the caller's CPU's main sheaf:
    /// `None` when the leaf is off, on a miss, or if the backend needs the
    /// guard.
    #[inline(always)]
    pub(super) fn pop(&self, i: usize) -> Option<usize> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        // SAFETY: `on` means `area` is a live area's column 0 (the area is
        // released only by `Kmalloc::destroy`, which turns `on` off first),
        // whose column `i` holds class `i`'s lines in the layout
        // `Heads::stacks` describes.
        match unsafe { self.cpus.pop_local(&self.area.column(i).stacks()) } {
            LocalOp::Done { value, .. } => Some(value),
            LocalOp::Miss | LocalOp::Pin => None,
        }
    }

    /// Pushes `p` onto the caller's CPU's main sheaf of class `i`: `false`
    /// when the leaf is off, on a miss, or if the backend needs the guard.
    ///
    /// # Safety
    /// `p` is a free object of class `i`'s cache, at an object boundary.
    #[inline(always)]
    pub(super) unsafe fn push(&self, i: usize, p: usize) -> bool {
        if !self.on.load(Ordering::Relaxed) {
            return false;
        }
        // SAFETY: as in `pop`; the caller's contract for the object.
        let op = unsafe { self.cpus.push_local(&self.area.column(i).stacks(), p) };
        matches!(op, LocalOp::Done { .. })
    }
}
