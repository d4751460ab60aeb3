//! The matrix definition: every (target, configuration, step) row that `cargo xtask ci` runs, in order.

mod lists;
mod matrix;
mod row;
#[cfg(test)]
mod tests;

pub use lists::*;
pub use matrix::*;
pub use row::{Action, Selection, Step, StepKind};
