//! Placeholder: being written.
#![no_std]
#![deny(missing_docs)]
