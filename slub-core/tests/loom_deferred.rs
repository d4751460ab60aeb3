//! loom model: see `loom_common::deferred::deferred_free`.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
fn deferred_free() {
    loom_common::deferred::deferred_free();
}
