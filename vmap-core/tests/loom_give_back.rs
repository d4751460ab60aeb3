#![cfg(kmm_loom)]
//! Loom model: see `loom_common::give_back_races_owner_alloc`. Run:
//! `RUSTFLAGS="--cfg kmm_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p vmap-core --test loom_give_back`

mod loom_common;

#[test]
fn give_back_races_owner_alloc() {
    loom_common::give_back_races_owner_alloc();
}
