//! loom model: see `loom_common::models::detached_take`.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
fn detached_take() {
    loom_common::models::detached_take();
}
