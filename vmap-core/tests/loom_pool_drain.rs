#![cfg(kmm_loom)]
//! Loom model: see `loom_common::free_races_pool_drain`. Run:
//! `RUSTFLAGS="--cfg kmm_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p vmap-core --test loom_pool_drain`

mod loom_common;

#[test]
fn free_races_pool_drain() {
    loom_common::free_races_pool_drain();
}
