//! The `CpuLocal` seam (moved here from slub-core, which re-exports it): how the allocators reaches "this CPU's" state and
//! keeps it consistent.
//!
//! The tid fast path runs with **no guard at all**: it reads the current CPU
//! id, loads that CPU's tid and then its freelist, and publishes the update
//! with one double-word CAS on that CPU's `(freelist, tid)` cell. The tid
//! (unique per CPU, stepped on every update) makes the CAS fail if anything
//! else updated the cell in between or if the task now runs elsewhere, so no
//! preempt_disable is needed there. Everything else (slow paths, per-CPU
//! partial lists, the sheaves) runs under [`CpuLocal::pin`]'s guard.
//!
//! # What a bare-metal implementation must guarantee
//!
//! An OS implements this trait for its kernel (one CPU = one slot):
//!
//! * [`nr_cpus`](CpuLocal::nr_cpus): the number of possible CPUs, fixed for
//!   the life of every cache; CPU ids are `0..nr_cpus`.
//! * [`current_cpu`](CpuLocal::current_cpu): the id of the CPU the caller is
//!   running on at the instant of the call (it may be stale right after, if
//!   preemption is on; the tid handles that). Must be cheap (a `%gs`/`tpidr_el1`
//!   relative load).
//! * [`pin`](CpuLocal::pin): returns a guard and the current id; while the
//!   guard lives the caller stays on that CPU and no other code that touches
//!   this allocator runs on it: preemption **and** interrupts that may
//!   allocate are off (`local_irq_save`), or the OS forbids allocation from
//!   interrupt context. The guard restores the previous state on drop.
//! * [`pinned_cpu`](CpuLocal::pinned_cpu) (optional, default `None`): the
//!   current id *only* if the caller is already pinned to that CPU without a
//!   guard, i.e. the same guarantee as [`pin`](CpuLocal::pin)'s guard holds
//!   until the caller returns (no other code that touches this allocator can
//!   run on that CPU id meanwhile). A kernel may answer `Some` in contexts
//!   that already run with preemption and allocating interrupts off; the
//!   hosted thread-as-CPU backend answers `Some` for a thread that owns its
//!   slot. The sheaves fast path then skips the guard altogether.
//! * [`try_pin_nolock`](CpuLocal::try_pin_nolock) (optional, default
//!   `None`): a guard for the `*_nolock` calls, which may run in any
//!   context, an interrupt or NMI handler that interrupted a holder of this
//!   CPU's guard included. It must answer `None` rather than wait, and must
//!   never answer `Some` while the code it interrupted is inside a pinned
//!   section (guard or `pinned_cpu`) on that CPU id: Linux's
//!   `local_trylock`, whose flag an NMI finds set. With `Some` the nolock
//!   calls use the CPU's sheaves; with `None` they use the tid front's
//!   lockless freelist (a DW-CAS, safe in any context).
//! * [`pop_local`](CpuLocal::pop_local) / [`push_local`](CpuLocal::push_local)
//!   (optional, default [`LocalOp::Pin`]): one pop or push on the stack of
//!   the CPU the caller runs on, described by [`LocalStacks`], with no
//!   guard, atomic against everything else that uses that CPU's stacks:
//!   code that runs on that CPU in between (a preempting task, an
//!   interrupt or signal handler) and holders of that CPU's guard. A
//!   kernel can implement it with its preemption-safe per-CPU operations;
//!   `LinuxCpus` (feature `std`) runs an rseq critical section. The
//!   sheaves front's fast paths then take no guard at all.
//! * [`on_each_cpu`](CpuLocal::on_each_cpu) (optional; the default reaches
//!   the calling CPU only): Linux's `on_each_cpu(func, info, wait = 1)`,
//!   which `kmem_cache_shrink` uses to flush every CPU's slab, partial
//!   slabs and sheaves. Each call of the function must run with that CPU's
//!   exclusive use, as under [`pin`](CpuLocal::pin)'s guard: on the CPU
//!   itself (an IPI whose handler pins, as Linux's `flush_all` runs
//!   per-CPU work), or from elsewhere holding the CPU's guard where the
//!   guard is a lock another thread may take. Never called from a pinned
//!   section or an interrupt handler (it waits for the other CPUs).
//! * `OWNER_ONLY_WRITES = true` only if the per-CPU cells are written solely
//!   by code running on their own CPU. The fast path computes the cell's
//!   address from [`current_cpu`](CpuLocal::current_cpu) and then runs the
//!   CAS on it; unlike Linux's `%gs`-relative `this_cpu_cmpxchg_double`, the
//!   address does not follow the task. So the claim holds only where a task
//!   cannot move to another CPU between the two: a kernel that does not
//!   preempt or migrate tasks running kernel code, or one whose `pin` guard
//!   is held across the fast path (then interrupts are the only thing that
//!   can interleave, against which the CPU-local DW-CAS is atomic). A
//!   preemptible kernel whose tasks migrate must answer `false`. With
//!   `true` the fast path uses [`DwCas::compare_exchange_local`]
//!   (`cmpxchg16b` without LOCK on x86_64); with `false` the SMP flavour,
//!   atomic against the cell's own CPU too: a task that moved meanwhile
//!   still updates the cell it read consistently, or fails on a changed tid
//!   and retries.
//!
//! The CAS must hit the cell of the CPU the task runs on *when the CAS
//! executes* (on x86 Linux it is `%gs`-relative); the hosted backends model
//! that by re-reading [`current_cpu`](CpuLocal::current_cpu) just before the CAS.
//!
//! [`DwCas::compare_exchange_local`]: crate::DwCas::compare_exchange_local

/// Per-CPU addressing and the guard that keeps a task on its CPU (see the
/// [module docs](self) for the bare-metal contract).
///
/// # Safety
/// Implementations must uphold the guarantees listed in the module docs; in
/// particular [`pinned_cpu`](Self::pinned_cpu) may answer `Some(id)` only
/// when the caller has exclusive use of CPU `id` for the rest of the call, as
/// if it held [`pin`](Self::pin)'s guard, and `OWNER_ONLY_WRITES = true`
/// must only be claimed when no two threads of execution can run the
/// allocator on the same CPU id at once (other than an interrupt nesting on
/// that CPU), because the CPU-local DW-CAS is not atomic against other CPUs.
/// [`on_each_cpu`](Self::on_each_cpu) may call `f(id)` only with CPU `id`'s
/// exclusive use, as [`pin`](Self::pin)'s guard gives it: the function
/// changes that CPU's per-CPU state.
pub unsafe trait CpuLocal: Sync {
    /// Whether only the owning CPU ever writes its per-CPU state (selects the
    /// CPU-local DW-CAS flavour).
    const OWNER_ONLY_WRITES: bool;

    /// Whether [`pinned_cpu`](Self::pinned_cpu) can answer `Some` (default
    /// `false`). If so, the fast paths ask it and nothing else: when it
    /// answers `None` they leave the operation to the out-of-line slow path,
    /// which uses [`current_cpu`](Self::current_cpu) and [`pin`](Self::pin).
    /// If not, the fast paths use `current_cpu` and `pin` inline.
    const HAS_PINNED_CPU: bool = false;

    /// Held while a task must stay on its CPU (preemption / IRQs off).
    type Guard<'a>
    where
        Self: 'a;

    /// Number of CPU slots; ids are `0..nr_cpus()`.
    fn nr_cpus(&self) -> usize;

    /// The current CPU, if the caller has a stable one outside a guard;
    /// `None` sends the fast path to [`pin`](Self::pin).
    fn current_cpu(&self) -> Option<usize>;

    /// Pins the caller to its CPU until the guard drops; returns the id.
    fn pin(&self) -> (Self::Guard<'_>, usize);

    /// Linux's `local_trylock`: pins the caller as [`pin`](Self::pin) does
    /// if that needs no waiting, else `None` (another task holds the CPU's
    /// guard: it was preempted or migrated inside its section). The sheaves
    /// front then falls back to the slab layer. The default waits in `pin`
    /// (a backend whose guard never contends).
    #[inline(always)]
    fn try_pin(&self) -> Option<(Self::Guard<'_>, usize)> {
        Some(self.pin())
    }

    /// [`try_pin`](Self::try_pin) from any context (module docs): `None`
    /// if the CPU's guard is held, by another task or by the code this call
    /// interrupted, or if the backend cannot tell (the default, right for a
    /// backend whose fast paths run guard-free through
    /// [`pinned_cpu`](Self::pinned_cpu)). Never waits.
    #[inline(always)]
    fn try_pin_nolock(&self) -> Option<(Self::Guard<'_>, usize)> {
        None
    }

    /// The current CPU if the caller is pinned to it already, with no guard
    /// needed: until the caller returns, nothing else runs this allocator on
    /// that CPU id (what [`pin`](Self::pin)'s guard would ensure). `None`
    /// (the default) sends the caller to [`pin`](Self::pin). The sheaves
    /// fast path asks this first, so that a backend whose pinning is free
    /// (one thread per slot) pays no guard bookkeeping.
    #[inline(always)]
    fn pinned_cpu(&self) -> Option<usize> {
        None
    }

    /// Runs `f(cpu)` for every CPU id this backend can reach, each with
    /// that CPU's exclusive use (as under [`pin`](Self::pin)'s guard, see
    /// the module docs), and returns once all calls have returned: how many
    /// ran. Linux's `on_each_cpu` with `wait`. The default reaches the
    /// calling CPU only (`f` under [`pin`](Self::pin), returning 1): right
    /// for a backend that cannot run code on, or lock, another CPU.
    ///
    /// Must not be called from a pinned section or an interrupt handler: an
    /// implementation may wait for the other CPUs, which may be waiting
    /// for the caller's.
    fn on_each_cpu(&self, f: &(dyn Fn(usize) + Sync)) -> usize {
        let (_g, cpu) = self.pin();
        f(cpu);
        1
    }

    /// Pops a word from the stack of the CPU the caller runs on, with no
    /// guard (see [`local_stack`]): [`LocalOp::Done`] with the word and the
    /// CPU, [`LocalOp::Miss`] if the stack is empty or stopped
    /// ([`stop_local`](Self::stop_local)), the caller's CPU has no id here
    /// or the step was interrupted
    /// (a backend may restart it instead), or [`LocalOp::Pin`] (the
    /// default) if the backend cannot, and the caller should pin and pop
    /// under the guard.
    ///
    /// # Safety
    /// `stacks` describes stacks for every CPU id of this backend
    /// ([`LocalStacks::new`]'s contract), written by nothing but these steps
    /// and holders of the CPUs' guards between
    /// [`stop_local`](Self::stop_local) and
    /// [`restart_local`](Self::restart_local).
    #[inline(always)]
    unsafe fn pop_local(&self, stacks: &LocalStacks) -> LocalOp {
        let _ = stacks;
        LocalOp::Pin
    }

    /// Pushes `value` onto the stack of the CPU the caller runs on, with
    /// no guard: as [`pop_local`](Self::pop_local), [`LocalOp::Miss`] if
    /// the stack is full.
    ///
    /// # Safety
    /// As [`pop_local`](Self::pop_local).
    #[inline(always)]
    unsafe fn push_local(&self, stacks: &LocalStacks, value: usize) -> LocalOp {
        let _ = (stacks, value);
        LocalOp::Pin
    }

    /// Stops the guard-free steps on CPU `cpu`'s stack of `stacks`, for a
    /// holder of that CPU's guard that is about to read or change the
    /// stack's slot pointer, length or slots: when this returns, no step
    /// is in flight on that stack and none commits on it until
    /// [`restart_local`](Self::restart_local). The steps do not test the
    /// guard (that was one more line on every `malloc`); a stopped stack
    /// has capacity 0 instead, which they read with its length. The
    /// default, for a backend without guard-free steps, does nothing.
    ///
    /// # Safety
    /// The caller holds `cpu`'s guard; `stacks` is a description these
    /// steps are given ([`pop_local`](Self::pop_local)'s contract).
    #[inline(always)]
    unsafe fn stop_local(&self, stacks: &LocalStacks, cpu: usize) {
        let _ = (stacks, cpu);
    }

    /// Lets the guard-free steps run on CPU `cpu`'s stack again, with
    /// capacity `cap`, after [`stop_local`](Self::stop_local) and the
    /// holder's changes (which the steps then see). The default does
    /// nothing.
    ///
    /// # Safety
    /// As [`stop_local`](Self::stop_local), which the caller called on
    /// this stack and whose guard it still holds; `cap` is the stack's
    /// capacity ([`LocalStacks::new`]'s contract).
    #[inline(always)]
    unsafe fn restart_local(&self, stacks: &LocalStacks, cpu: usize, cap: usize) {
        let _ = (stacks, cpu, cap);
    }

    /// Test backends only (feature `testing` or `--cfg kmm_loom`; not part
    /// of the API, absent otherwise): a point at which the backend may
    /// preempt or migrate the caller.
    #[cfg(any(kmm_loom, feature = "testing"))]
    #[inline(always)]
    fn preempt_point(&self, at: crate::testing::PreemptPoint) {
        let _ = at;
    }
}

// SAFETY: forwards to `T`.
unsafe impl<T: CpuLocal> CpuLocal for &T {
    const OWNER_ONLY_WRITES: bool = T::OWNER_ONLY_WRITES;
    const HAS_PINNED_CPU: bool = T::HAS_PINNED_CPU;
    type Guard<'a>
        = T::Guard<'a>
    where
        Self: 'a;

    #[inline(always)]
    fn nr_cpus(&self) -> usize {
        (**self).nr_cpus()
    }
    #[inline(always)]
    fn current_cpu(&self) -> Option<usize> {
        (**self).current_cpu()
    }
    #[inline(always)]
    fn pin(&self) -> (Self::Guard<'_>, usize) {
        (**self).pin()
    }
    #[inline(always)]
    fn try_pin(&self) -> Option<(Self::Guard<'_>, usize)> {
        (**self).try_pin()
    }
    #[inline(always)]
    fn try_pin_nolock(&self) -> Option<(Self::Guard<'_>, usize)> {
        (**self).try_pin_nolock()
    }
    #[inline(always)]
    fn pinned_cpu(&self) -> Option<usize> {
        (**self).pinned_cpu()
    }
    fn on_each_cpu(&self, f: &(dyn Fn(usize) + Sync)) -> usize {
        (**self).on_each_cpu(f)
    }
    #[inline(always)]
    unsafe fn pop_local(&self, stacks: &LocalStacks) -> LocalOp {
        // SAFETY: the caller's contract, forwarded.
        unsafe { (**self).pop_local(stacks) }
    }
    #[inline(always)]
    unsafe fn push_local(&self, stacks: &LocalStacks, value: usize) -> LocalOp {
        // SAFETY: the caller's contract, forwarded.
        unsafe { (**self).push_local(stacks, value) }
    }
    #[inline(always)]
    unsafe fn stop_local(&self, stacks: &LocalStacks, cpu: usize) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { (**self).stop_local(stacks, cpu) }
    }
    #[inline(always)]
    unsafe fn restart_local(&self, stacks: &LocalStacks, cpu: usize, cap: usize) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { (**self).restart_local(stacks, cpu, cap) }
    }
    #[cfg(any(kmm_loom, feature = "testing"))]
    #[inline(always)]
    fn preempt_point(&self, at: crate::testing::PreemptPoint) {
        (**self).preempt_point(at)
    }
}

pub mod local_stack;
pub use local_stack::{LocalOp, LocalStacks};

#[cfg(feature = "std")]
pub mod hosted;
#[cfg(all(feature = "std", target_os = "linux"))]
pub mod linux;
#[cfg(feature = "std")]
pub mod thread;
