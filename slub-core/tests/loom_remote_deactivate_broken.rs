//! Model (2) on the broken variant `DEACTIVATE_BLIND_STORE`: deactivation
//! stores the unfrozen state over a remote free that raced in; the object is
//! lost, so destroy finds a live object that nobody holds.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn remote_free_lost_by_blind_deactivate() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::DEACTIVATE_BLIND_STORE);
    loom_common::models::remote_vs_deactivate();
}
