//! The deliberately broken variant the loom model must catch (only under
//! `--cfg loom`). `tests/loom_lazy_purge_broken.rs` selects it at run time;
//! loom runs model threads on one OS thread, so a plain std static is enough.

use core::sync::atomic::{AtomicU8, Ordering};

/// All correct.
pub const NONE: u8 = 0;
/// `LazyAccount::add` publishes the area on the lazy list before adding its
/// pages to `vmap_lazy_nr` (the 2.6.34 "flag then atomic add" order).
pub const PUBLISH_BEFORE_COUNT: u8 = 1;

static MUTATION: AtomicU8 = AtomicU8::new(NONE);

/// Selects the broken variant (tests only).
pub fn set(m: u8) {
    MUTATION.store(m, Ordering::Relaxed);
}

/// Whether variant `m` is selected.
pub fn active(m: u8) -> bool {
    MUTATION.load(Ordering::Relaxed) == m
}
