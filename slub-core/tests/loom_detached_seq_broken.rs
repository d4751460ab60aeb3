//! The detached-freelist model under ia64's `cmp8xchg16` on the broken
//! variant `DETACHED_SEQ_NOT_BUMPED`: the cell's hi is the chain's length
//! alone, which comes back, so a push preempted across a take-over and a
//! new chain of the same length succeeds on a chain that is gone, and an
//! object given back to its slab is linked into a chain again.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn a_stale_push_succeeds_when_the_sequence_does_not_step() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::DETACHED_SEQ_NOT_BUMPED);
    loom_common::models::detached_cmp8xchg16();
}
