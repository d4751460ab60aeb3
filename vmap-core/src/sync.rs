//! The loom shim, private to this crate: `core::sync::atomic`, or loom's
//! atomics under the crate family's own `--cfg kmm_loom`, so `loom::model`
//! runs the unchanged code. Not re-exported.

#[cfg(not(kmm_loom))]
pub(crate) use core::sync::atomic;
#[cfg(kmm_loom)]
pub(crate) use loom::sync::atomic;
