//! Hooks for this workspace's own tests (feature `testing`, or the loom
//! build with `--cfg kmm_loom`). Not part of the API: an OS neither sees
//! nor implements any of this, and it may change at any time.

pub use arch_api::testing::PreemptPoint;
