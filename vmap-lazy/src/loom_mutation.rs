//! The deliberately broken variants this crate's loom models must catch
//! (only under `--cfg kmm_loom`; the mechanism is [`MutationSwitch`]).

use arch_api::sync::MutationSwitch;

/// All correct.
pub const NONE: u8 = 0;
/// `LazyAccount::add` publishes the area on the lazy list before adding its
/// pages to `vmap_lazy_nr` (the 2.6.34 "flag then atomic add" order).
pub const PUBLISH_BEFORE_COUNT: u8 = 1;

/// The switch: `MUTATION.set(X)` in a broken model, `MUTATION.active(X)`
/// where the variant is applied.
pub static MUTATION: MutationSwitch = MutationSwitch::new();
