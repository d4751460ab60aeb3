#![cfg(kmm_loom)]
//! The model of `loom_pool_drain` against the deliberately broken variant
//! `vmap_core::loom_mutation::DRAIN_TWO_PHASE` (described where it is applied, in
//! `src/sharded/front.rs`). The model must fail.

mod loom_common;

#[test]
#[should_panic]
fn free_races_pool_drain_catches_broken_variant() {
    vmap_core::loom_mutation::MUTATION.set(vmap_core::loom_mutation::DRAIN_TWO_PHASE);
    loom_common::free_races_pool_drain();
}
