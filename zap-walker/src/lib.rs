//! zap-walker: map, translate and unmap ("zap") ranges of any
//! [`PageTableLayout`] under a work budget, with an `mmu_gather`-style TLB
//! batch and lock-break points.
//!
//! # Example
//!
//! Map four pages, translate, unmap them under a work budget. The frame
//! source, direct map and TLB are the kernel's; here they are the hosted
//! `PhysArena` and `SoftTlb` (feature `std`):
//!
//! ```
//! use arch_api::{CostModel, PhysArena, SoftTlb};
//! use arch_x86_64::X86_64Pml4;
//! use zap_walker::{FrameSource, Frames, Gather, MapFlags, VirtAddr, Walker, WorkBudget};
//!
//! const PAGE: u64 = 4096;
//! let mem = PhysArena::new(1 << 20, PAGE).unwrap(); // FrameSource + PhysMap
//! let tlb = SoftTlb::new(1, PAGE, CostModel::FREE); // TlbFlush, one CPU
//! let mut walker = Walker::<X86_64Pml4, _>::new(&mem)?;
//!
//! let va = VirtAddr::new(0xffff_c900_0000_0000);
//! let mut frames = [arch_api::PhysAddr::new(0); 4];
//! mem.alloc_many(PAGE, PAGE, &mut frames).unwrap();
//! walker.map_range(va, Frames::List(&frames), MapFlags::WRITE)?;
//! assert_eq!(walker.translate(va).unwrap().frame, frames[0]);
//!
//! // The zap clears the entries, flushes once, then frees the frames and the
//! // tables that became empty; it breaks (cond_resched) when the budget is spent.
//! let mut gather: Gather<_> = Gather::new(tlb.on(0));
//! let end = VirtAddr::new(va.as_u64() + 4 * PAGE);
//! let stats = walker.zap_range(va, end, &mut WorkBudget::for_page_size(PAGE, true), &mut gather)?;
//! assert_eq!(stats.leaves_cleared, 4);
//! assert!(walker.translate(va).is_none());
//! # Ok::<(), zap_walker::WalkError>(())
//! ```
//!
//! One [`Walker`] serves every layout of the workspace (x86_64 4- and 5-level,
//! aarch64 4K/16K/64K granules, ia64-sim): it only reads the geometry and the
//! entry format from `arch-api`, never names an architecture.
//!
//! * [`Walker::map_range`] installs leaves, allocating table pages from the
//!   caller's [`FrameSource`] (all of them before the first leaf is written, so
//!   a failed map changes nothing); a range inside one last-level table (a
//!   small vmalloc) takes one descent instead of the plan/install passes.
//! * [`Walker::translate`] is the software MMU.
//! * [`Walker::zap_range`] clears a range under a [`ZapBudget`] (the seam:
//!   `work`, `address`, `unbounded` in [`budget`]), batching freed frames and
//!   emptied tables in a [`Gather`] that flushes the TLB once per batch (up
//!   to eight disjoint ranges in one shootdown) and returns the frames with one
//!   `FrameSource::free_many` call, and
//!   calls the OS's lock-break hook (`cond_resched`) when the budget is spent
//!   (a batch ends there too, unless the gather stays open across breaks:
//!   [`Gather::across_breaks`], for a caller who owns the range, as
//!   Linux's `mmu_gather` does across `cond_resched`).
//!   Table pages that become empty are freed, as Linux's `free_pgtables`;
//!   [`Walker::free_empty_table`] gives one back on request so a large leaf
//!   can take its place (Linux's `pmd_free_pte_page`).
//! * [`LeafPath`] maps, clears and translates base pages inside existing
//!   last-level tables without the walker's lock (Linux's lockless vmalloc
//!   PTE writes), declining whatever needs a table.
//!
//! `LeafPath` is model-checked with loom (`tests/loom_leaf_path*.rs`): table
//! words come from the crate's private loom shim (loom's atomics under
//! `--cfg kmm_loom`), so the model runs this code.
//!
//! Start reading at `walker.rs` (tables, live counts beside them, attaching
//! to the kernel's table, the root split), then `live.rs`, `store.rs` and
//! `counts.rs` (how the counts are read, kept and rescanned),
//! `occupancy.rs` (the summaries beside them that let a zap jump over empty
//! parts of a sparse table), then `zap.rs`
//! (the level function that returns the address it reached), then
//! `budget/work.rs`.
#![no_std]
#![deny(missing_docs)]

#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod budget;
mod counts;
mod errors;
mod free_table;
mod gather;
mod gather_chain;
mod leaf_path;
mod live;
#[cfg(kmm_loom)]
#[doc(hidden)]
pub mod loom_mutation;
mod map;
mod occupancy;
mod stats;
mod stock;
mod store;
mod sync;
mod translate;
mod unflushed;
mod walker;
mod zap;
mod zap_pte;

pub use arch_api::{FrameSource, MapFlags, PageTableLayout, PhysAddr, PhysMap, TlbFlush, VirtAddr};
pub use budget::{
    AddressBudget, BreakInfo, LockBreak, NoBreak, Unbounded, WorkBudget, ZAP_BLOCK_PAGES,
    ZAP_BLOCK_PAGES_PREEMPT, ZapBudget,
};
pub use errors::WalkError;
pub use gather::{
    DEFAULT_BATCH, FrameSink, FreeToSource, Gather, GatherStats, Lent, MAX_CHAIN_PAGES,
};
pub use leaf_path::LeafPath;
pub use map::{Frames, MapHint};
pub use stats::WalkStats;
pub use translate::Translation;
pub use unflushed::Unflushed;
pub use walker::{MAX_LEVELS, Walker};
