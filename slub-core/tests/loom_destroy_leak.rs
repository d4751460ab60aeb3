//! loom model: see `loom_common::models::destroy_leak`.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
fn destroy_leak() {
    loom_common::models::destroy_leak();
}
