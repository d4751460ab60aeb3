//! The large-block list emptied by a load and a plain store instead of one
//! swap (`LARGE_TAKE_TWO_STEP`): a record pushed in between is lost, which
//! the model must catch.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "broken list")]
fn take_while_pushing_catches_a_two_step_take() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::LARGE_TAKE_TWO_STEP);
    loom_common::large_list::take_while_pushing();
}
