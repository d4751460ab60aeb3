#![cfg(kmm_loom)]
//! Loom model: see `loom_common::alloc_races_remote_free`. Run:
//! `RUSTFLAGS="--cfg kmm_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p vmap-core --test loom_alloc_free`

mod loom_common;

#[test]
fn alloc_races_remote_free() {
    loom_common::alloc_races_remote_free();
}
