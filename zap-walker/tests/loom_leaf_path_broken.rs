#![cfg(loom)]
//! The model of `loom_leaf_path` against the deliberately broken variant
//! `zap_walker::loom_mutation::PLAIN_LOCKED_DELTA` (described where it is
//! applied, `Walker::counts_shared` in `src/walker.rs`). The model must fail.

mod common;
mod loom_common;

#[test]
#[should_panic(expected = "live count differs")]
fn leaf_path_beside_locked_walker_catches_broken_variant() {
    zap_walker::loom_mutation::set(zap_walker::loom_mutation::PLAIN_LOCKED_DELTA);
    loom_common::leaf_path_beside_locked_walker();
}
