//! The few places where a `--cfg kmm_loom` test can switch in a deliberately
//! broken variant (see [`crate::loom_mutation`]). Outside loom every hook is
//! the correct behaviour and compiles to nothing extra.

#[cfg(kmm_loom)]
use crate::loom_mutation::{self as m, MUTATION};

/// First tid of CPU `cpu`: the CPU number.
#[inline(always)]
pub(crate) fn initial_tid(cpu: u64) -> u64 {
    cpu
}

/// The tid after `tid` on the same CPU.
#[inline(always)]
pub(crate) fn next_tid(tid: u64, step: u64) -> u64 {
    #[cfg(kmm_loom)]
    if MUTATION.active(m::TID_NOT_BUMPED) {
        return tid;
    }
    tid.wrapping_add(step)
}

/// A next pointer about to become the CPU freelist.
#[inline(always)]
pub(crate) fn end_token_mutation(next: u64) -> u64 {
    #[cfg(kmm_loom)]
    if MUTATION.active(m::NO_END_TOKEN) && crate::freelist::is_token(next) {
        return crate::freelist::NO_SLAB;
    }
    next
}

/// Whether `deactivate` overwrites the slab state blindly.
#[inline(always)]
pub(crate) fn deactivate_blind_store() -> bool {
    #[cfg(kmm_loom)]
    if MUTATION.active(m::DEACTIVATE_BLIND_STORE) {
        return true;
    }
    false
}

/// Whether the barn unlinks a full sheaf in a second critical section.
#[inline(always)]
pub(crate) fn barn_two_phase() -> bool {
    #[cfg(kmm_loom)]
    if MUTATION.active(m::BARN_TWO_PHASE) {
        return true;
    }
    false
}

/// Whether deferred frees skip the grace period (free as soon as handed over).
#[inline(always)]
pub(crate) fn deferred_no_grace() -> bool {
    #[cfg(kmm_loom)]
    if MUTATION.active(m::DEFERRED_NO_GRACE) {
        return true;
    }
    false
}

/// Inside the owner's update of its deferred batch: a scheduling point for
/// loom (so a flusher that takes the batch in two steps can interleave), nothing else.
#[inline(always)]
pub(crate) fn batch_add_window() {
    #[cfg(kmm_loom)]
    loom::thread::yield_now();
}

/// Whether a slab a free froze is left off every list (lost).
#[inline(always)]
pub(crate) fn frozen_slab_dropped() -> bool {
    #[cfg(kmm_loom)]
    if MUTATION.active(m::FROZEN_SLAB_DROPPED) {
        return true;
    }
    false
}

/// Whether the inline remote free ignores a slab's change of lists.
#[inline(always)]
pub(crate) fn remote_try_ignores_lists() -> bool {
    #[cfg(kmm_loom)]
    if MUTATION.active(m::REMOTE_TRY_IGNORES_LISTS) {
        return true;
    }
    false
}

/// Whether a detached freelist is taken over by a load and a swap of
/// whatever the cell holds by then, instead of one CAS of what was read.
#[inline(always)]
pub(crate) fn detached_take_two_step() -> bool {
    #[cfg(kmm_loom)]
    if MUTATION.active(m::DETACHED_TAKE_TWO_STEP) {
        return true;
    }
    false
}

/// Whether the detached freelist's cell keeps its sequence number, so that
/// its hi is the chain's length alone.
#[inline(always)]
pub(crate) fn detached_seq_not_bumped() -> bool {
    #[cfg(kmm_loom)]
    if MUTATION.active(m::DETACHED_SEQ_NOT_BUMPED) {
        return true;
    }
    false
}
