#![cfg(kmm_loom)]
//! The model of `loom_leaf_path` (a new table on a recycled page) against
//! the deliberately broken variant `zap_walker::loom_mutation::NO_SUMMARY_BIT`
//! (the locked owner links the new last-level table without marking its
//! group in the parent's occupancy summary): the model's consistency check
//! covers the summaries as well as the counts, so it must fail.

mod common;
mod loom_common;

#[test]
#[should_panic(expected = "a live count differs")]
fn a_link_without_its_summary_bit_is_caught() {
    zap_walker::loom_mutation::MUTATION.set(zap_walker::loom_mutation::NO_SUMMARY_BIT);
    loom_common::leaf_path_beside_locked_walker(loom_common::Table::New);
}
