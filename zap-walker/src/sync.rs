//! The crate's loom shim (crate-private): `core`'s atomics, or loom's under
//! `--cfg kmm_loom`, so the shipped code is what the models run.

#[cfg(not(kmm_loom))]
pub(crate) use core::sync::atomic;
#[cfg(kmm_loom)]
pub(crate) use loom::sync::atomic;
