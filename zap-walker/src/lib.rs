//! zap-walker: map, translate and unmap ("zap") ranges of any
//! [`arch_api::PageTableLayout`] under a work budget.
//!
//! It will hold: the generic walker, the `ZapBudget` seam (`work`, `address`,
//! `unbounded` policies), the mmu_gather-style TLB batch and the freeing of
//! empty table pages. Lands with issue 4; today it fixes its place in the
//! dependency graph (arch-api only: it never names an architecture).
#![no_std]
#![deny(missing_docs)]

pub use arch_api::{PageTableLayout, TlbFlush};
