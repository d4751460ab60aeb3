//! The architecture seam of the workspace.
//!
//! Everything that differs between CPUs is behind one of four traits here, and
//! every other crate is written against them:
//!
//! * [`PageTableLayout`] / [`PageTableEntry`] — how many levels, how a virtual
//!   address splits into indices, what an entry looks like (`layout`).
//! * [`DwCas`] on a [`DwCell`] — the double-word compare-and-swap that SLUB's
//!   `(freelist, tid)` fast path needs, in an SMP and a CPU-local flavour (`dwcas`).
//! * [`TlbFlush`] — page / range / full invalidation with Linux's flush ceiling (`tlb`).
//! * [`FrameSource`] / [`PhysMap`] — where physical frames come from and how the
//!   kernel reaches them (`frame`).
//!
//! Hosted builds (feature `std`) add the shared simulation pieces: a physical
//! memory [`PhysArena`] backed by host memory and the [`SoftTlb`] model with its
//! [`CostModel`]. [`sync`] holds the [`Mutex`](sync::Mutex) over the raw lock
//! the OS supplies.
//!
//! Start reading at `layout.rs`, then `dwcas.rs`; the backends live in
//! `arch-x86_64`, `arch-aarch64` and `arch-ia64-sim`.
#![no_std]
#![deny(missing_docs)]

#[cfg(any(test, feature = "std"))]
extern crate std;

mod addr;
mod atomic;
pub mod dwcas;
pub mod frame;
pub mod layout;
pub mod sync;
pub mod tlb;

#[cfg(all(feature = "std", any(test, feature = "testing")))]
pub mod conformance;
#[cfg(feature = "std")]
pub mod cost;
#[cfg(feature = "std")]
pub mod phys_arena;
#[cfg(feature = "std")]
pub mod soft_tlb;

pub use addr::{PhysAddr, VirtAddr};
pub use dwcas::{Compare, DoubleWord, DwCas, DwCell, LockedDwCas};
pub use frame::{FrameError, FrameSource, OffsetPhysMap, PhysMap};
pub use layout::{EntryKind, LayoutInfo, MapFlags, PageTableEntry, PageTableLayout};
pub use tlb::{DEFAULT_FLUSH_CEILING_PAGES, TlbFlush, range_list_pages};

#[cfg(feature = "std")]
pub use cost::CostModel;
#[cfg(feature = "std")]
pub use phys_arena::PhysArena;
#[cfg(feature = "std")]
pub use soft_tlb::{SoftTlb, SoftTlbCpu, TlbStats};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("arch-api supports 64-bit targets only (the double-word CAS is 2 x 64 bits)");
