//! The architecture seam of the workspace.
//!
//! # Example
//!
//! What a kernel writes against the seam: its page allocator as a
//! [`FrameSource`], its direct map as a [`PhysMap`]; a DW-CAS user goes
//! through [`DwCas`] (here the portable [`LockedDwCas`]).
//!
//! ```
//! use arch_api::{
//!     DoubleWord, DwCas, DwCell, FrameError, FrameSource, LockedDwCas, OffsetPhysMap, PhysAddr,
//!     PhysMap,
//! };
//! use core::sync::atomic::{AtomicU64, Ordering};
//!
//! /// A boot-time bump allocator over `[next, end)` that never frees.
//! struct BootFrames {
//!     next: AtomicU64,
//!     end: u64,
//! }
//!
//! impl FrameSource for BootFrames {
//!     fn granule(&self) -> u64 {
//!         4096
//!     }
//!     fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
//!         if size == 0 || size % 4096 != 0 || !align.is_power_of_two() {
//!             return Err(FrameError::BadLayout);
//!         }
//!         let mut cur = self.next.load(Ordering::Relaxed);
//!         loop {
//!             let start = (cur + align - 1) & !(align - 1);
//!             if start + size > self.end {
//!                 return Err(FrameError::OutOfFrames);
//!             }
//!             match self.next.compare_exchange(cur, start + size, Ordering::Relaxed, Ordering::Relaxed) {
//!                 Ok(_) => return Ok(PhysAddr::new(start)),
//!                 Err(seen) => cur = seen,
//!             }
//!         }
//!     }
//!     fn free(&self, _addr: PhysAddr, _size: u64) -> Result<(), FrameError> {
//!         Err(FrameError::NotAllocated)
//!     }
//! }
//!
//! let frames = BootFrames { next: AtomicU64::new(0x10_0000), end: 0x20_0000 };
//! let direct_map = OffsetPhysMap { offset: 0xffff_8880_0000_0000 };
//! let table = frames.alloc(4096, 4096)?;
//! assert_eq!(direct_map.phys_to_ptr(table) as u64, 0xffff_8880_0010_0000);
//!
//! // SLUB's (freelist, tid) pair: both words or neither.
//! let cell = DwCell::new(DoubleWord::new(0x1000, 7));
//! let old = LockedDwCas::compare_exchange(&cell, DoubleWord::new(0x1000, 7), DoubleWord::new(0x2000, 8));
//! assert_eq!(old, Ok(DoubleWord::new(0x1000, 7)));
//! assert_eq!(cell.load(), DoubleWord::new(0x2000, 8));
//! # Ok::<(), FrameError>(())
//! ```
//!
//! An OS names its whole platform once, as a [`Platform`] (an `unsafe`
//! trait of associated types: layout, frames + direct map, TLB flusher,
//! CPU-local access, raw lock, DW-CAS); the shipped types of the other
//! crates take that one parameter. Everything that differs between CPUs is
//! behind one of these traits:
//!
//! * [`PageTableLayout`] / [`PageTableEntry`] — how many levels, how a virtual
//!   address splits into indices, what an entry looks like (`layout`).
//! * [`DwCas`] on a [`DwCell`] — the double-word compare-and-swap that SLUB's
//!   `(freelist, tid)` fast path needs, in an SMP and a CPU-local flavour (`dwcas`).
//! * [`TlbFlush`] — page / range / full invalidation with Linux's flush ceiling (`tlb`).
//! * [`FrameSource`] / [`PhysMap`] — where physical frames come from and how the
//!   kernel reaches them (`frame`).
//! * [`CpuLocal`] — the calling CPU and the guard that keeps a task on it,
//!   with what it must guarantee under preemption and interrupts (`cpu`).
//!
//! Hosted builds (feature `std`) add the shared simulation pieces: a physical
//! memory `PhysArena` backed by host memory, the `SoftTlb` model with its
//! `CostModel`, `ThreadCpus` (each thread is a CPU) and `HostedCpus` (each
//! thread declares its CPU). [`sync`] holds the [`Mutex`](sync::Mutex) over the raw lock
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
pub mod cpu;
pub mod dwcas;
pub mod frame;
pub mod layout;
mod platform;
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
#[cfg(any(kmm_loom, feature = "testing"))]
#[doc(hidden)]
pub mod testing;

pub use addr::{PhysAddr, VirtAddr};
#[cfg(feature = "std")]
pub use cpu::hosted::HostedCpus;
#[cfg(all(feature = "std", target_os = "linux"))]
pub use cpu::linux::{CpuLock, LinuxCpus, MAX_LINUX_CPUS};
#[cfg(feature = "std")]
pub use cpu::thread::{MAX_THREAD_CPUS, ThreadCpus};
pub use cpu::{CpuLocal, LocalOp, LocalStacks};
pub use dwcas::{Compare, DoubleWord, DwCas, DwCell, LockedDwCas};
pub use frame::{FrameError, FrameSource, OffsetPhysMap, PhysMap};
pub use layout::{EntryKind, LayoutInfo, MapFlags, PageTableEntry, PageTableLayout};
pub use platform::Platform;
pub use tlb::{DEFAULT_FLUSH_CEILING_PAGES, TlbFlush, range_list_pages};

#[cfg(feature = "std")]
pub use cost::CostModel;
#[cfg(feature = "std")]
pub use phys_arena::PhysArena;
#[cfg(feature = "std")]
pub use soft_tlb::{SoftTlb, SoftTlbCpu, TlbStats};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("arch-api supports 64-bit targets only (the double-word CAS is 2 x 64 bits)");
