#![cfg(kmm_loom)]
//! The model of `loom_leaf_path` (existing table) against the deliberately
//! broken variant `zap_walker::loom_mutation::PLAIN_LOCKED_DELTA` (described
//! where it is applied, `Walker::counts_shared` in `src/walker.rs`). The
//! model must fail.

mod common;
mod loom_common;

#[test]
#[should_panic(expected = "live count differs")]
fn plain_locked_delta_loses_an_unlocked_update() {
    zap_walker::loom_mutation::MUTATION.set(zap_walker::loom_mutation::PLAIN_LOCKED_DELTA);
    loom_common::leaf_path_beside_locked_walker(loom_common::Table::Existing);
}
