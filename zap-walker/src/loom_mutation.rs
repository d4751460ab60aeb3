//! The deliberately broken variant the loom model must catch (only under
//! `--cfg loom`). `tests/loom_leaf_path_broken.rs` selects it at run time;
//! loom runs model threads on one OS thread, so a plain static is enough.

use core::sync::atomic::{AtomicU8, Ordering};

/// All correct.
pub const NONE: u8 = 0;
/// The locked walker changes live counts with a plain load and store even
/// once a [`LeafPath`](crate::LeafPath) exists (see `Walker::counts_shared`).
pub const PLAIN_LOCKED_DELTA: u8 = 1;

static MUTATION: AtomicU8 = AtomicU8::new(NONE);

/// Selects the broken variant (tests only).
pub fn set(m: u8) {
    MUTATION.store(m, Ordering::Relaxed);
}

/// Whether variant `m` is selected.
pub fn active(m: u8) -> bool {
    MUTATION.load(Ordering::Relaxed) == m
}
