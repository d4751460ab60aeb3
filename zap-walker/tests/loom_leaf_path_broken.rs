#![cfg(kmm_loom)]
//! The model of `loom_leaf_path` (a new table on a recycled page) against
//! the deliberately broken variant `zap_walker::loom_mutation::RELAXED_LINK`
//! (described where it is applied, `TableRef::store` in `src/walker.rs`).
//! The model must fail.

mod common;
mod loom_common;

#[test]
#[should_panic(expected = "stale entry")]
fn relaxed_link_shows_a_stale_entry() {
    zap_walker::loom_mutation::MUTATION.set(zap_walker::loom_mutation::RELAXED_LINK);
    loom_common::leaf_path_beside_locked_walker(loom_common::Table::New);
}
