//! The `PurgePolicy` seam: when lazily freed areas are purged (one TLB flush
//! for the union of their ranges, then their virtual ranges are released).
//!
//! One file per policy: [`LazyMaxPages`] (default; Linux's `lazy_max_pages`),
//! [`Eager`] (purge on every `vfree`, the 2010 workaround) and [`LookupCost`]
//! (purge when one allocation search visited more than N nodes, the 2010
//! experiment). A policy only decides *when*; the order inside a purge
//! (flush, then release) is fixed by the allocator.

mod eager;
mod lazy_max_pages;
mod lookup_cost;

pub use eager::Eager;
pub use lazy_max_pages::{LazyMaxPages, lazy_max_pages};
pub use lookup_cost::LookupCost;

/// What a policy sees when asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PurgeCtx {
    /// Pages lazily freed and not yet purged (`vmap_lazy_nr`).
    pub lazy_pages: u64,
    /// Number of CPUs of the system (`num_online_cpus()`).
    pub cpus: u32,
    /// The page size in bytes.
    pub page_size: u64,
}

/// When to purge lazily freed areas.
///
/// Both hooks are called without any allocator lock held; returning `true`
/// makes the caller run `purge_vmap_area_lazy` at once.
pub trait PurgePolicy: Send + Sync {
    /// The name the harness prints.
    const NAME: &'static str;

    /// After a `vfree`/`vunmap` added an area to the lazy list.
    fn after_free(&self, ctx: &PurgeCtx) -> bool;

    /// After an allocation search that visited `nodes_visited` tree nodes.
    fn after_alloc(&self, nodes_visited: u32, ctx: &PurgeCtx) -> bool {
        let _ = (nodes_visited, ctx);
        false
    }
}
