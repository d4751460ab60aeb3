//! The detached-freelist model on broken variants: `DETACHED_TAKE_TWO_STEP`
//! (the slow path takes the chain over by reading it and then swapping
//! whatever the cell holds by then, so a free that joined in between is
//! lost and destroy finds the object still in use) and
//! `FROZEN_SLAB_DROPPED` (the slab a chain freezes is put on no list).
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn a_free_joining_during_the_take_is_lost() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::DETACHED_TAKE_TWO_STEP);
    loom_common::models::detached_take();
}

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn a_chain_that_freezes_its_slab_loses_it_when_put_on_no_list() {
    // The chain makes X partial from full: given back, X is frozen for the
    // CPU and must go on its partial list (`put_cpu_partial`).
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::FROZEN_SLAB_DROPPED);
    loom_common::models::detached_take();
}
