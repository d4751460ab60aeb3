//! The deliberately broken variants the loom models must catch (only under
//! `--cfg loom`). A test binary selects one at run time; each broken model
//! lives in its own `tests/loom_*_broken.rs` so the switch never reaches the
//! correct models. Loom runs model threads on one OS thread, so a plain std
//! static is enough.

use core::sync::atomic::{AtomicU8, Ordering};

/// All correct.
pub const NONE: u8 = 0;
/// `free_area` routes by address hash instead of the recorded node id.
pub const FREE_BY_HASH: u8 = 1;
/// The pool drain copies, unlocks, releases and then clears.
pub const DRAIN_TWO_PHASE: u8 = 2;
/// A steal checks a slice is empty and takes it under two lock acquisitions.
pub const STEAL_UNCHECKED: u8 = 3;

static MUTATION: AtomicU8 = AtomicU8::new(NONE);

/// Selects the broken variant (tests only).
pub fn set(m: u8) {
    MUTATION.store(m, Ordering::Relaxed);
}

/// Whether variant `m` is selected.
pub fn active(m: u8) -> bool {
    MUTATION.load(Ordering::Relaxed) == m
}
