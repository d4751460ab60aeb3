//! The models that free into another CPU's slab, on the broken variant
//! `REMOTE_TRY_IGNORES_LISTS`: the fast path's inline remote free pushes
//! onto a full slab without making it partial (or onto one it empties
//! without taking it off its list), so the slab is lost and destroy cannot
//! find its objects.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn remote_free_loses_the_slab() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::REMOTE_TRY_IGNORES_LISTS);
    loom_common::models::remote_vs_deactivate();
}

#[test]
#[should_panic(expected = "destroy must find every object free")]
fn remote_free_into_a_full_slab_loses_it() {
    slub_core::loom_mutation::MUTATION.set(slub_core::loom_mutation::REMOTE_TRY_IGNORES_LISTS);
    loom_common::models::put_cpu_partial();
}
