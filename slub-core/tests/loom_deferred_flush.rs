//! loom model: see `loom_common::deferred::flush_while_adding`.
#![cfg(kmm_loom)]

mod loom_common;

#[test]
fn flush_while_adding() {
    loom_common::deferred::flush_while_adding();
}
