//! Model (4) on the broken variant `BARN_TWO_PHASE`: the barn unlinks a
//! full sheaf in a second critical section, so two CPUs take the same sheaf
//! and hand out its object twice.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "object handed out twice")]
fn barn_two_phase_hands_out_a_sheaf_twice() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::BARN_TWO_PHASE);
    loom_common::models::barn_exchange();
}
