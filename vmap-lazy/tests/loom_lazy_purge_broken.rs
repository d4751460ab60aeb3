#![cfg(kmm_loom)]
//! The same model against the deliberately broken ordering
//! `vmap_lazy::loom_mutation::PUBLISH_BEFORE_COUNT` (applied in
//! `src/lazy.rs`, `NodeLazy::publish`): the area is published on the lazy
//! list under the node's lock, but its pages are added to `vmap_lazy_nr`
//! only after the lock is dropped, the 2.6.34 "flag then atomic add". A
//! purge between the two steps subtracts pages not yet counted (underflow)
//! and the late add leaves pages counted that no list holds. The model must
//! fail.

mod loom_common;

#[test]
#[should_panic]
fn vfree_races_purge_catches_publish_before_count() {
    vmap_lazy::loom_mutation::MUTATION.set(vmap_lazy::loom_mutation::PUBLISH_BEFORE_COUNT);
    loom_common::vfree_races_purge();
}
