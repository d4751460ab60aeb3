#![cfg(kmm_loom)]
//! The model of `loom_alloc_free` against the deliberately broken variant
//! `vmap_core::loom_mutation::FREE_BY_HASH` (described where it is applied, in
//! `src/sharded/front.rs`). The model must fail.

mod loom_common;

#[test]
#[should_panic]
fn alloc_races_remote_free_catches_broken_variant() {
    vmap_core::loom_mutation::MUTATION.set(vmap_core::loom_mutation::FREE_BY_HASH);
    loom_common::alloc_races_remote_free();
}
