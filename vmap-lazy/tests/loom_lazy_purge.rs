#![cfg(kmm_loom)]
//! vfree racing purge with the shipped ordering (count, then publish): the
//! counter never underflows and no lazy page is forgotten or counted twice.

mod loom_common;

#[test]
fn vfree_races_purge() {
    loom_common::vfree_races_purge();
}
