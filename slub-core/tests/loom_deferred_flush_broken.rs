//! Model `flush_while_adding` on the broken variant `BATCH_STEAL_UNLOCKED`:
//! the flusher takes CPU 1's batch without the line's flag while its owner
//! is adding to it, so the owner's object lands in a batch already handed
//! over and freed (lost), which the model must catch.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "broken flush")]
fn flush_while_adding_catches_an_unlocked_steal() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::BATCH_STEAL_UNLOCKED);
    loom_common::deferred::flush_while_adding();
}
