//! The deliberately broken variants this crate's loom models must catch
//! (only under `--cfg kmm_loom`; the mechanism is [`MutationSwitch`]).

use arch_api::sync::MutationSwitch;

/// All correct.
pub const NONE: u8 = 0;
/// The tid is not stepped on updates: a CAS can succeed on a stale freelist
/// (ABA), and after a migration on another CPU whose tid happens to match.
pub const TID_NOT_BUMPED: u8 = 1;
/// An exhausted CPU freelist holds "no slab" instead of the slab's end
/// token: the slow path cannot find the slab to deactivate (the 2014 leak).
pub const NO_END_TOKEN: u8 = 2;
/// `deactivate_slab` computes the unfrozen state and then stores it over
/// whatever the slab holds now, losing a remote free that raced in.
pub const DEACTIVATE_BLIND_STORE: u8 = 3;
/// The barn hands out a full sheaf and unlinks it in a second critical
/// section, so two CPUs can take the same sheaf.
pub const BARN_TWO_PHASE: u8 = 4;
/// Deferred frees go back to their slabs as soon as their batch is handed
/// over, without waiting for its grace period (a free under a reader).
pub const DEFERRED_NO_GRACE: u8 = 5;
/// The deferred large-block list is emptied by a load and a plain store
/// instead of one swap, so a record pushed in between is lost (a leak).
pub const LARGE_TAKE_TWO_STEP: u8 = 6;
/// `flush_deferred` takes another CPU's partial deferred batch by a load
/// and a plain store instead of one swap, so it can hand over a batch its
/// owner has taken out and is adding to (an object lost or freed twice).
pub const BATCH_STEAL_TWO_STEP: u8 = 7;
/// A free that freezes a full slab for its CPU (`put_cpu_partial`) puts it
/// on no list: the slab and its objects are lost to the cache.
pub const FROZEN_SLAB_DROPPED: u8 = 8;
/// The fast path's inline remote free (`try_free_to_slab`) pushes onto a
/// slab that would change lists (a full slab made partial, an emptied one)
/// as if it stayed where it is: the slab ends on no list with free objects
/// (lost to the cache).
pub const REMOTE_TRY_IGNORES_LISTS: u8 = 9;
/// A CPU's detached freelist is taken over (to give it back to its slab)
/// by reading it and then swapping whatever the cell holds by then, not by
/// one CAS of what was read: a free that joined the chain in between is
/// lost with it (its slab never empties).
pub const DETACHED_TAKE_TWO_STEP: u8 = 10;
/// The detached freelist's cell does not step its sequence number: its hi
/// is the chain's length alone, which comes back (a chain taken over, a
/// new one of the same length started), so a DW-CAS that compares hi only
/// (ia64's `cmp8xchg16`) lets a preempted push succeed on a chain that is
/// gone: an object given back to its slab is linked into a chain again.
pub const DETACHED_SEQ_NOT_BUMPED: u8 = 11;

/// The switch: `MUTATION.set(X)` in a broken model, `MUTATION.active(X)`
/// where the variant is applied.
pub static MUTATION: MutationSwitch = MutationSwitch::new();
