#![cfg(kmm_loom)]
//! The model of `loom_give_back` against the deliberately broken variant
//! `vmap_core::loom_mutation::GIVE_BACK_UNCHECKED` (described where it is
//! applied, in `src/sharded/front.rs`). The model must fail.

mod loom_common;

#[test]
#[should_panic]
fn give_back_races_owner_alloc_catches_broken_variant() {
    vmap_core::loom_mutation::MUTATION.set(vmap_core::loom_mutation::GIVE_BACK_UNCHECKED);
    loom_common::give_back_races_owner_alloc();
}
