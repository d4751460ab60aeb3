//! The aarch64 backend: VMSAv8-64 stage 1 translation tables with a 48-bit
//! virtual address, the `casp` / `ldxp`+`stxp` double-word CAS, and `tlbi`
//! invalidation.
//!
//! # Example
//!
//! A kernel names its granule as the layout type `L` of the walker and
//! vmalloc (the TTBR1 half with the 4K granule here); the descriptor type
//! writes the Arm ARM's bits:
//!
//! ```
//! use arch_aarch64::{Aarch64Granule4K, Descriptor};
//! use arch_api::{EntryKind, MapFlags, PageTableEntry, PageTableLayout, PhysAddr, VirtAddr};
//!
//! let va = VirtAddr::new(0xffff_0000_1234_5000);
//! let idx: Vec<usize> = (0..4).map(|l| Aarch64Granule4K::index(va, l)).collect();
//! assert_eq!(idx, [0, 0, 145, 325]);
//!
//! let page = Descriptor::<Aarch64Granule4K>::new_leaf(PhysAddr::new(0x4008_0000), MapFlags::WRITE, 3);
//! assert_eq!(page.kind(3), EntryKind::Leaf);
//! assert_eq!(page.addr(), PhysAddr::new(0x4008_0000));
//! ```
//!
//! It implements the `arch-api` seam:
//!
//! * [`PageTableLayout`](arch_api::PageTableLayout) for the three translation
//!   granules, [`Aarch64Granule4K`], [`Aarch64Granule16K`] and
//!   [`Aarch64Granule64K`] (module [`layout`]);
//! * [`PageTableEntry`](arch_api::PageTableEntry) for [`Descriptor<G>`], one
//!   entry type per granule, with [`DescriptorFlags`] (module [`descriptor`]);
//! * [`DwCas`](arch_api::DwCas) for `Casp` (module `dwcas`, compiled for
//!   `target_arch = "aarch64"` only): `caspal` / `casp` with LSE, an
//!   `ldaxp`/`stlxp` loop without it;
//! * [`TlbFlush`](arch_api::TlbFlush) for `Aarch64Tlb` (module [`tlb`], bare
//!   metal only: `target_arch = "aarch64"`, `target_os = "none"`). Hosted
//!   builds use `arch_api::SoftTlb`, re-exported here with feature `std`.
//!
//! Start reading at [`layout`] (the granules and how a virtual address splits
//! into indices), then [`descriptor`]. All references are to the Arm
//! Architecture Reference Manual for A-profile, DDI 0487 ("Arm ARM"): chapter
//! D8, "The AArch64 Virtual Memory System Architecture", for translation
//! granules, descriptor formats (D8.3) and TLB maintenance (D8.13 and the
//! `TLBI` instructions), and chapter C6 for `CASP`, `LDXP` and `STXP`.
#![no_std]
#![deny(missing_docs)]

#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod descriptor;
#[cfg(target_arch = "aarch64")]
pub mod dwcas;
pub mod layout;
pub mod tlb;

pub use descriptor::{
    ATTR_INDEX_DEVICE_NGNRE, ATTR_INDEX_NORMAL, Descriptor, Descriptor4K, Descriptor16K,
    Descriptor64K, DescriptorFlags, MAIR_EL1_VALUE,
};
#[cfg(target_arch = "aarch64")]
pub use dwcas::Casp;
pub use layout::{Aarch64Granule4K, Aarch64Granule16K, Aarch64Granule64K, Granule};
#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub use tlb::Aarch64Tlb;
pub use tlb::{RangeFlush, plan_range_flush, tlbi_va_operand};

/// The hosted TLB model: hosted builds count flushes in software instead of
/// executing `tlbi`, which traps at EL0.
#[cfg(feature = "std")]
pub use arch_api::SoftTlb;
