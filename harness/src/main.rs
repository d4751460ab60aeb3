//! The harness (placeholder while the foundation lands).
fn main() {}
