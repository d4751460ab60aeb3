#![cfg(kmm_loom)]
//! `LeafPath` beside the locked walker on one last-level table, shipped
//! code: every live count stays exact and readers see whole entries, in a
//! table that exists and in one the locked walker links meanwhile.

mod common;
mod loom_common;

use loom_common::Table;

#[test]
fn leaf_path_beside_locked_walker_in_an_existing_table() {
    loom_common::leaf_path_beside_locked_walker(Table::Existing);
}

#[test]
fn leaf_path_beside_locked_walker_in_a_new_table() {
    loom_common::leaf_path_beside_locked_walker(Table::New);
}
