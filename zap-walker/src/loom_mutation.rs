//! The deliberately broken variants the loom models must catch (only under
//! `--cfg loom`). A test binary selects one at run time; each broken model
//! lives in its own `tests/loom_*_broken.rs` so the switch never reaches the
//! others. Loom runs model threads on one OS thread, so a plain static is
//! enough.

use core::sync::atomic::{AtomicU8, Ordering};

/// All correct.
pub const NONE: u8 = 0;
/// The locked walker changes live counts with a plain load and store even
/// once a [`LeafPath`](crate::LeafPath) exists (see `Walker::counts_shared`).
pub const PLAIN_LOCKED_DELTA: u8 = 1;
/// A one-table map links a new last-level table before it sets the
/// table's live count (see `Walker::map_in_leaf_table`).
pub const LINK_BEFORE_COUNT: u8 = 2;

static MUTATION: AtomicU8 = AtomicU8::new(NONE);

/// Selects the broken variant (tests only).
pub fn set(m: u8) {
    MUTATION.store(m, Ordering::Relaxed);
}

/// Whether variant `m` is selected.
pub fn active(m: u8) -> bool {
    MUTATION.load(Ordering::Relaxed) == m
}
