#![cfg(kmm_loom)]
//! Loom model: see `loom_common::steal_races_owner_alloc`. Run:
//! `RUSTFLAGS="--cfg kmm_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p vmap-core --test loom_steal`

mod loom_common;

#[test]
fn steal_races_owner_alloc() {
    loom_common::steal_races_owner_alloc();
}
