//! The `put_cpu_partial` models, and the detached freelist's (whose chain,
//! given back, freezes its full slab), on the broken variant
//! `FROZEN_SLAB_DROPPED`: a free that freezes a full slab for its CPU puts
//! it on no list, so the slab and the objects freed to it are lost and
//! destroy cannot find them.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn frozen_slab_lost() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::FROZEN_SLAB_DROPPED);
    loom_common::models::put_cpu_partial();
}

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn frozen_slab_lost_on_drain() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::FROZEN_SLAB_DROPPED);
    loom_common::models::put_cpu_partial_drain();
}

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn frozen_slab_lost_by_a_detached_chain() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::FROZEN_SLAB_DROPPED);
    loom_common::models::detached_take();
}
