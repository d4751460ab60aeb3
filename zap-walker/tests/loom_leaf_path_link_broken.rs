#![cfg(kmm_loom)]
//! The model of `loom_leaf_path` (new table) against the deliberately broken
//! variant `zap_walker::loom_mutation::LINK_BEFORE_COUNT` (described where
//! it is applied, `Walker::map_in_leaf_table` in `src/map.rs`). The model
//! must fail.

mod common;
mod loom_common;

#[test]
#[should_panic(expected = "live count differs")]
fn linking_before_the_count_loses_an_unlocked_update() {
    zap_walker::loom_mutation::MUTATION.set(zap_walker::loom_mutation::LINK_BEFORE_COUNT);
    loom_common::leaf_path_beside_locked_walker(loom_common::Table::New);
}
