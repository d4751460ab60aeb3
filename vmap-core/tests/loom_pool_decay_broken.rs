#![cfg(kmm_loom)]
//! The model of `loom_pool_decay` against the deliberately broken variant
//! `vmap_core::loom_mutation::DECAY_TWO_PHASE` (described where it is
//! applied, in `src/sharded/front/decay.rs`). The model must fail.

mod loom_common;

#[test]
#[should_panic]
fn decay_races_pool_alloc_catches_broken_variant() {
    vmap_core::loom_mutation::MUTATION.set(vmap_core::loom_mutation::DECAY_TWO_PHASE);
    loom_common::decay_races_pool_alloc();
}
