//! The deliberately broken variants this crate's loom models must catch
//! (only under `--cfg kmm_loom`; the mechanism is [`MutationSwitch`]).

use arch_api::sync::MutationSwitch;

/// All correct.
pub const NONE: u8 = 0;
/// `NodeLazy::publish` puts the area on the lazy list under the node's lock
/// but adds its pages to `vmap_lazy_nr` after the lock is dropped (the
/// 2.6.34 "flag then atomic add" order).
pub const PUBLISH_BEFORE_COUNT: u8 = 1;

/// The switch: `MUTATION.set(X)` in a broken model, `MUTATION.active(X)`
/// where the variant is applied.
pub static MUTATION: MutationSwitch = MutationSwitch::new();
