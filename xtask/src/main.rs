//! cargo xtask (placeholder).
fn main() {}
