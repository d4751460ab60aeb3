//! Hooks for this family's own tests (feature `testing`, or the loom build
//! with `--cfg kmm_loom`). Not part of the API: an OS neither sees nor
//! implements any of this, and it may change at any time.

/// Where a lockless fast path offers a test backend a preemption point (its
/// [`CpuLocal::preempt_point`](crate::CpuLocal::preempt_point)): the window
/// between reading the tid and the freelist and the CAS, where a kernel
/// with preemption on may be preempted or migrated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreemptPoint {
    /// Alloc fast path: after reading tid and freelist, before the CAS.
    AllocWindow,
    /// Free fast path: after reading tid and freelist, before the CAS.
    FreeWindow,
    /// Sheaves push or pop: after reading the main sheaf's size, before
    /// writing it (a section only a pinned caller may be in).
    SheafUpdate,
}
