#![cfg(kmm_loom)]
//! `LeafPath` beside the locked walker on one last-level table, shipped
//! code: readers see whole entries and never a stale one, and every live
//! count stays exact, in a table that exists and in one the locked walker
//! links meanwhile on a recycled page.

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
