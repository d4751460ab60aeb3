//! vmap-core: the kernel virtual-address-space allocator (Linux's vmalloc KVA
//! allocator, `alloc_vmap_area` / `free_vmap_area`).
//!
//! # Example
//!
//! A window of kernel virtual space, nodes from a fixed pool (no heap):
//!
//! ```
//! use vmap_core::{Augmented, FixedPool, VirtAddr, VmapError, VmapSpace};
//!
//! const PAGE: u64 = 4096;
//! let start = VirtAddr::new(0xffff_c900_0000_0000);
//! let end = VirtAddr::new(0xffff_c900_0400_0000); // 64 MiB
//! let pool = FixedPool::<64>::new(); // or a `static`: it stays put while in use
//! let mut space = VmapSpace::<Augmented, _>::new(start, end, PAGE, &pool)?;
//!
//! let a = space.alloc(4 * PAGE, PAGE, start, end)?;
//! let b = space.alloc(PAGE, PAGE, start, end)?;
//! assert_eq!((a.va_start, b.va_start), (start, a.va_end)); // lowest fit first
//! space.free(a.va_start)?;
//! let c = space.alloc(2 * PAGE, PAGE, start, end)?; // reuses the hole
//! assert_eq!(c.va_start, start);
//! # Ok::<(), VmapError>(())
//! ```
//!
//! A [`VmapSpace`] hands out page-granular [`VmapArea`]s from `[start, end)`
//! at the lowest fitting address, with the vmem constraints Linux lacks
//! (`phase`, `nocross`, exact address; see [`AllocRequest`]), one-search
//! [`find_unlink`](VmapSpace::find_unlink), and errors instead of panics
//! ([`VmapError`]). Tree nodes come from the caller ([`NodeSource`], asked
//! for like arch-api's `FrameSource`: `&self`, `u64` sizes, `FrameError`):
//! no global state and no heap unless the `alloc` feature is on.
//!
//! The seam is [`FreeAreaSearch`]: how a free block is found, and where
//! busy areas are kept for it. Five policies, identical placement:
//! [`Linear`] (2010 baseline), [`FreeVmapCache`] (2010 fix), [`Augmented`]
//! (free tree with subtree maxima, Linux since 5.2), [`BTree`] (wide nodes
//! with per-slot maxima) and, with `alloc`, `Blocks` (no free index: one
//! B+tree of busy areas whose gaps are the free blocks, each inner slot
//! keeping the largest gap below it); [`DefaultPolicy`] is `Blocks` with
//! `alloc`, `Augmented` without.
//!
//! Start reading at `space.rs`, then `policy/`, `busy.rs` (where busy
//! areas are found by address) and `block_tree/`; the two-tree policies'
//! trees are `free_tree.rs` and `tree.rs`.
//! With `alloc`, the `sharded` module adds per-node fronts (Linux 6.9's split
//! of the global vmap lock, 2024) and a global-lock
//! variant behind the shared `VmapNodes` trait.
#![no_std]
#![deny(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

#[cfg(all(feature = "alloc", feature = "testing"))]
pub mod block_tree;
#[cfg(all(feature = "alloc", not(feature = "testing")))]
mod block_tree;
mod busy;
mod error;
mod free_tree;
mod node;
mod policy;
mod request;
mod space;
#[cfg(feature = "stats")]
mod stats;
#[cfg(feature = "alloc")]
mod sync;
mod tree;

#[cfg(feature = "alloc")]
pub mod sharded;

#[cfg(kmm_loom)]
#[doc(hidden)]
pub mod loom_mutation;

pub use arch_api::VirtAddr;
pub use error::VmapError;
#[cfg(feature = "alloc")]
pub use node::VecSource;
pub use node::{FixedPool, NodeIdx, NodeSource, TreeNode};
#[cfg(feature = "alloc")]
pub use policy::Blocks;
pub use policy::{Augmented, BTree, DefaultPolicy, FreeAreaSearch, FreeVmapCache, Linear};
pub use request::AllocRequest;
#[cfg(feature = "alloc")]
pub use sharded::{GlobalVmap, ShardedVmap, VmapNodes};
pub use space::{Iter, VmapArea, VmapSpace};
#[cfg(feature = "stats")]
pub use stats::VmapStats;
