//! Model (1) on the broken variant `TID_NOT_BUMPED`: with the tid not stepped,
//! a CAS whose window saw another task allocate on the same slot still
//! matches (the compare looks at the tid only) and hands that object out again.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "object handed out twice")]
fn migration_fails_when_tid_is_not_bumped() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::TID_NOT_BUMPED);
    loom_common::models::migration();
}
