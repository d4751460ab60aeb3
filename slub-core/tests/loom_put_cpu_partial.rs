//! loom model: see `loom_common::models::put_cpu_partial`.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
fn put_cpu_partial() {
    loom_common::models::put_cpu_partial();
}

#[test]
fn put_cpu_partial_drain() {
    loom_common::models::put_cpu_partial_drain();
}
