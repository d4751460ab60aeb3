//! The deliberately broken variants this crate's loom models must catch
//! (only under `--cfg kmm_loom`; the mechanism is [`MutationSwitch`]).

use arch_api::sync::MutationSwitch;

/// All correct.
pub const NONE: u8 = 0;
/// The locked walker changes live counts with a plain load and store even
/// once a [`LeafPath`](crate::LeafPath) exists (see `Walker::counts_shared`).
pub const PLAIN_LOCKED_DELTA: u8 = 1;
/// A one-table map links a new last-level table before it sets the
/// table's live count (see `Walker::map_in_leaf_table`).
pub const LINK_BEFORE_COUNT: u8 = 2;

/// The switch: `MUTATION.set(X)` in a broken model, `MUTATION.active(X)`
/// where the variant is applied.
pub static MUTATION: MutationSwitch = MutationSwitch::new();
