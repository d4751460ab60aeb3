//! loom model: see `loom_common::large_list::take_while_pushing`.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
fn take_while_pushing() {
    loom_common::large_list::take_while_pushing();
}
