#![cfg(loom)]
//! `LeafPath` beside the locked walker on one last-level table, shipped
//! code: every live count stays exact and readers see whole entries.

mod common;
mod loom_common;

#[test]
fn leaf_path_beside_locked_walker() {
    loom_common::leaf_path_beside_locked_walker();
}
