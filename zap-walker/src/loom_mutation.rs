//! The deliberately broken variants this crate's loom models must catch
//! (only under `--cfg kmm_loom`; the mechanism is [`MutationSwitch`]).

use arch_api::sync::MutationSwitch;

/// All correct.
pub const NONE: u8 = 0;
/// Table entries are stored without release (see `TableRef::store`), so a
/// table is linked before its zeroing is visible to a reader that follows
/// the link.
pub const RELAXED_LINK: u8 = 1;

/// The switch: `MUTATION.set(X)` in a broken model, `MUTATION.active(X)`
/// where the variant is applied.
pub static MUTATION: MutationSwitch = MutationSwitch::new();
/// A store that makes an entry present forgets its occupancy-summary bit
/// (see `occupancy::bit`), so the summary no longer covers every present
/// entry.
pub const NO_SUMMARY_BIT: u8 = 2;
