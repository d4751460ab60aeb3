//! The detached-freelist model on the broken variant
//! `DETACHED_TAKE_TWO_STEP`: the slow path takes the chain over by reading
//! it and then swapping whatever the cell holds by then, so a free that
//! joined in between is lost and destroy finds the object still in use.
//! (One broken variant per test binary: the switch is global.)
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn a_free_joining_during_the_take_is_lost() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::DETACHED_TAKE_TWO_STEP);
    loom_common::models::detached_take();
}
