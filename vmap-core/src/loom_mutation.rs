//! The deliberately broken variants this crate's loom models must catch
//! (only under `--cfg kmm_loom`; the mechanism is [`MutationSwitch`]).

use arch_api::sync::MutationSwitch;

/// All correct.
pub const NONE: u8 = 0;
/// `free_area` routes by address hash instead of the recorded node id.
pub const FREE_BY_HASH: u8 = 1;
/// The pool drain copies, unlocks, releases and then clears.
pub const DRAIN_TWO_PHASE: u8 = 2;
/// A steal checks a slice is empty and takes it under two lock acquisitions.
pub const STEAL_UNCHECKED: u8 = 3;
/// A drain picks the empty slices and gives them back to the reserve under
/// two lock acquisitions.
pub const GIVE_BACK_UNCHECKED: u8 = 4;
/// The pool decay picks the oldest entries under one lock acquisition and
/// releases them under a second.
pub const DECAY_TWO_PHASE: u8 = 5;

/// The switch: `MUTATION.set(X)` in a broken model, `MUTATION.active(X)`
/// where the variant is applied.
pub static MUTATION: MutationSwitch = MutationSwitch::new();
