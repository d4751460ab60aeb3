//! loom models: see `loom_common::models::detached_take` and
//! `detached_cmp8xchg16`.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
fn detached_take() {
    loom_common::models::detached_take();
}

#[test]
fn detached_cmp8xchg16() {
    loom_common::models::detached_cmp8xchg16();
}
