//! vmap-core: the kernel virtual-address-space allocator (Linux's vmalloc KVA
//! allocator, `alloc_vmap_area` / `free_vmap_area`).
//!
//! It will hold: `VmapArea`s handed out from `[start, end)` at the lowest
//! fitting address; the `FreeAreaCache` seam with the `linear`,
//! `free-area-cache` (2010) and `augmented` (free tree with subtree max)
//! policies producing identical placement; one-search `find_unlink`; sharded
//! per-node busy trees; vmem-style `phase` / `nocross` / exact-address
//! requests. Lands with issue 3; today the crate only fixes its place in the
//! dependency graph (arch-api below it, vmap-lazy above it).
#![no_std]
#![deny(missing_docs)]

pub use arch_api::VirtAddr;
