//! Model `flush_while_adding` on the broken variant `BATCH_STEAL_TWO_STEP`:
//! the flusher takes CPU 1's batch by a load and a plain store while its owner
//! is adding to it, so the owner's object lands in a batch already handed
//! over and freed (lost), which the model must catch.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "broken flush")]
fn flush_while_adding_catches_a_two_step_steal() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::BATCH_STEAL_TWO_STEP);
    loom_common::deferred::flush_while_adding();
}
