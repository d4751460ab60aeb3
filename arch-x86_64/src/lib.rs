//! The x86_64 backend of the workspace's architecture seam ([`arch_api`]).
//!
//! # Example
//!
//! A kernel names the paging mode as the layout type `L` of the walker and
//! vmalloc; the entry type writes the SDM's bits:
//!
//! ```
//! use arch_api::{EntryKind, MapFlags, PageTableEntry, PageTableLayout, PhysAddr, VirtAddr};
//! use arch_x86_64::{Pml4Entry, X86_64Pml4};
//!
//! // vmalloc space of a 4-level kernel: PML4 index 402, then 0, 1, 3.
//! let va = VirtAddr::new(0xffff_c900_0020_3000);
//! let idx: Vec<usize> = (0..X86_64Pml4::LEVELS).map(|l| X86_64Pml4::index(va, l)).collect();
//! assert_eq!(idx, [402, 0, 1, 3]);
//! assert!(!X86_64Pml4::is_canonical(VirtAddr::new(0x0000_8000_0000_0000)));
//!
//! let pte = Pml4Entry::new_leaf(PhysAddr::new(0x1234_5000), MapFlags::WRITE | MapFlags::GLOBAL, 3);
//! assert_eq!(pte.kind(3), EntryKind::Leaf);
//! assert_eq!(pte.addr(), PhysAddr::new(0x1234_5000));
//! ```
//!
//! It implements:
//!
//! * [`PageTableLayout`](arch_api::PageTableLayout) for the two paging modes,
//!   [`X86_64Pml4`] (4 levels, 48-bit) and [`X86_64La57`] (5 levels, 57-bit),
//!   in `layout.rs`;
//! * [`PageTableEntry`](arch_api::PageTableEntry) for [`X86Entry`] with its
//!   [`X86Flags`] bits, in `entry.rs`;
//! * [`DwCas`](arch_api::DwCas) for [`Cmpxchg16b`]: `lock cmpxchg16b` and the
//!   lock-less CPU-local `cmpxchg16b`, in `dwcas.rs` (x86_64 targets only);
//! * [`TlbFlush`](arch_api::TlbFlush) for `X86Tlb` (`invlpg`, INVPCID / CR4.PGE
//!   / CR3 full flush), in `tlb.rs`, on bare metal (`target_os = "none"`) only.
//!   Hosted builds, which cannot run privileged instructions, use the shared
//!   software model `arch_api::SoftTlb` (re-exported here with the `std` feature).
//!
//! References are to the Intel SDM: Vol. 3A §4.5 (paging structures),
//! §4.10.4 (TLB invalidation), Vol. 2A (CMPXCHG16B, CPUID).
//!
//! Start reading at `entry.rs` (the bit-7 PS/PAT subtlety), then `layout.rs`,
//! `dwcas.rs` and `tlb.rs`. The layouts and entries are plain arithmetic and
//! compile on every target (the harness uses them on aarch64 hosts); all
//! inline asm is behind `cfg(target_arch = "x86_64")`.
#![no_std]
#![deny(missing_docs)]

#[cfg(any(test, feature = "std"))]
extern crate std;

#[cfg(all(target_arch = "x86_64", not(miri)))]
pub mod cpuid;
#[cfg(target_arch = "x86_64")]
pub mod dwcas;
pub mod entry;
pub mod layout;
pub mod tlb;

#[cfg(target_arch = "x86_64")]
pub use dwcas::Cmpxchg16b;
pub use entry::{La57Entry, Pml4Entry, X86Entry, X86Flags};
pub use layout::{X86_64La57, X86_64Pml4};
#[cfg(all(target_arch = "x86_64", any(target_os = "none", doc)))]
pub use tlb::X86Tlb;

/// The TLB to use in hosted builds: the shared counted software model.
#[cfg(feature = "std")]
pub use arch_api::SoftTlb;
