//! A **simulated** ia64 (Itanium) backend.
//!
//! # Example
//!
//! The layout replays ia64's geometry; [`Cmp8xchg16`] compares only the `hi`
//! word (SLUB's tid) and exchanges both:
//!
//! ```
//! use arch_api::{DoubleWord, DwCas, DwCell, PageTableLayout, VirtAddr};
//! use arch_ia64_sim::{Cmp8xchg16, Ia64Sim};
//!
//! assert_eq!(Ia64Sim::PAGE_SIZE, 16 * 1024);
//! assert_eq!(Ia64Sim::LEVELS, 4);
//! // The region is the top three bits of the address.
//! assert_eq!(Ia64Sim::region(VirtAddr::new(0xa000_0000_0000_0000)), 5);
//!
//! let cell = DwCell::new(DoubleWord::new(0x1000, 7));
//! // `lo` differs from what is expected, `hi` (the tid) matches: the CAS succeeds.
//! let r = Cmp8xchg16::compare_exchange(&cell, DoubleWord::new(0xdead, 7), DoubleWord::new(0x2000, 8));
//! assert!(r.is_ok());
//! assert_eq!(cell.load(), DoubleWord::new(0x2000, 8));
//! ```
//!
//! There is no ia64 hardware or Rust target to run on; this crate models the
//! architecture in plain Rust for two reasons:
//!
//! * the 2005 `munmap` of an untouched 16 TiB file mapping that took 24 s
//!   (Linux re-descended from the top for every 8-page block) happened on
//!   ia64 with 16 KiB pages and four levels; the
//!   walker and the harness replay it on that original geometry, where the
//!   root is shared by the eight regions;
//! * ia64's `cmp8xchg16` compares one word and exchanges two, so the SLUB
//!   fast path is exercised against a double-word CAS that never looks at the
//!   freelist, only at the tid.
//!
//! What it implements from `arch-api`:
//!
//! * [`PageTableLayout`](arch_api::PageTableLayout) for [`Ia64Sim`]
//!   (`layout.rs`): regions, the shared root, 55 bits per region;
//! * [`PageTableEntry`](arch_api::PageTableEntry) for [`Ia64Pte`] (`pte.rs`):
//!   the VHPT short format;
//! * [`DwCas`](arch_api::DwCas) for [`Cmp8xchg16`] (`cmp8xchg16.rs`): compare
//!   `hi` only, exchange both;
//! * [`TlbFlush`](arch_api::TlbFlush) for `PtcGa` (`ptc.rs`, feature `std`):
//!   range purges as `ptc.ga` broadcasts into the hosted
//!   `SoftTlb` model.
//!
//! Start reading at `layout.rs`, then `cmp8xchg16.rs`. The layout, entries and
//! CAS are `no_std`; the TLB purge needs the hosted model. Sources are the
//! Intel Itanium Architecture Software Developer's Manual (Vol. 2 for
//! addressing and the VHPT, Vol. 3 for instructions) and facts about Linux's
//! ia64 page-table scheme; no Linux code is used.
#![no_std]
#![deny(missing_docs)]

#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod cmp8xchg16;
pub mod layout;
pub mod ptc;
pub mod pte;

pub use cmp8xchg16::Cmp8xchg16;
pub use layout::Ia64Sim;
pub use ptc::PurgeBlock;
#[cfg(feature = "std")]
pub use ptc::{PtcGa, ia64_cost_model, ia64_soft_tlb};
pub use pte::{Ia64Pte, Ia64PteFlags};
