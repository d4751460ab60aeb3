//! Model (5) on the broken variant `DEFERRED_NO_GRACE`: a handed-over
//! batch is freed without waiting for its grace period, so a reader still
//! inside sees its object overwritten.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "freed under a reader")]
fn deferred_no_grace_frees_under_a_reader() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::DEFERRED_NO_GRACE);
    loom_common::deferred::deferred_free();
}
