#![cfg(kmm_loom)]
//! Loom model: see `loom_common::decay_races_pool_alloc`. Run:
//! `RUSTFLAGS="--cfg kmm_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p vmap-core --test loom_pool_decay`

mod loom_common;

#[test]
fn decay_races_pool_alloc() {
    loom_common::decay_races_pool_alloc();
}
