//! loom model: see `loom_common::models::remote_vs_deactivate`.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
fn remote_vs_deactivate() {
    loom_common::models::remote_vs_deactivate();
}
