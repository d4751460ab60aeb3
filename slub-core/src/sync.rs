//! Small interior-mutability helpers for state protected by a guard or a lock
//! rather than by the type system.

use core::cell::UnsafeCell;

/// A raw pointer in an `UnsafeCell`: a list link or per-CPU pointer whose
/// protection (node lock, CpuLocal guard) is documented where it is used.
/// Transparent: a CPU's slot pointer in its sheaves line is read by the
/// backend's guard-free step as a plain pointer (`sheaves/line.rs`).
#[repr(transparent)]
pub(crate) struct UnsafeCellPtr<T>(UnsafeCell<*mut T>);

impl<T> UnsafeCellPtr<T> {
    pub(crate) const fn null() -> Self {
        Self(UnsafeCell::new(core::ptr::null_mut()))
    }

    /// # Safety
    /// The caller holds whatever protects this link.
    #[inline(always)]
    pub(crate) unsafe fn get(&self) -> *mut T {
        // SAFETY: the caller holds the protecting lock or guard, so no write
        // races with this read.
        unsafe { *self.0.get() }
    }

    /// # Safety
    /// The caller holds whatever protects this link.
    #[inline(always)]
    pub(crate) unsafe fn set(&self, v: *mut T) {
        // SAFETY: as for `get`: exclusive under the protecting lock or guard.
        unsafe { *self.0.get() = v }
    }
}
