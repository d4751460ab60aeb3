//! loom model: see `loom_common::models::barn_exchange`.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
fn barn_exchange() {
    loom_common::models::barn_exchange();
}
