//! Model (3) on the broken variant `NO_END_TOKEN`: an exhausted CPU freelist
//! forgets its slab (no end token), the slab stays frozen and unreachable,
//! and destroy cannot return it: the 2014 leak.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn lost_slab_without_end_token() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::NO_END_TOKEN);
    loom_common::models::destroy_leak();
}
