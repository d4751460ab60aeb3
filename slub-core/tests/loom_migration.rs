//! loom model: see `loom_common::models::migration`.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
fn migration() {
    loom_common::models::migration();
}
