//! `lookup-cost`: purge when one allocation search visited more than N tree
//! nodes (the 2010 experiment; N = 100..200 was best). The purge trigger is
//! the cost lazily freed areas impose on searches, not their number. A
//! `lazy_max_pages` backstop keeps the lazy list bounded when searches stay
//! cheap (a fast search policy may never trigger the cost rule).

use super::{PurgeCtx, PurgePolicy, lazy_max_pages};

/// Purge when an allocation search visited more than `max_nodes` nodes.
#[derive(Clone, Copy, Debug)]
pub struct LookupCost {
    /// The search cost (nodes visited) above which a purge runs.
    pub max_nodes: u32,
}

impl LookupCost {
    /// The 2010 experiment's best setting was N = 100..200.
    pub const DEFAULT_MAX_NODES: u32 = 128;
}

impl Default for LookupCost {
    fn default() -> Self {
        Self {
            max_nodes: Self::DEFAULT_MAX_NODES,
        }
    }
}

impl PurgePolicy for LookupCost {
    const NAME: &'static str = "lookup-cost";

    fn after_free(&self, ctx: &PurgeCtx) -> bool {
        ctx.lazy_pages > lazy_max_pages(ctx.cpus, ctx.page_size)
    }

    fn after_alloc(&self, nodes_visited: u32, ctx: &PurgeCtx) -> bool {
        nodes_visited > self.max_nodes && ctx.lazy_pages > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_on_search_cost_only_with_lazy_pages() {
        let p = LookupCost { max_nodes: 100 };
        let ctx = PurgeCtx {
            lazy_pages: 4,
            cpus: 8,
            page_size: 4096,
        };
        assert!(!p.after_alloc(100, &ctx));
        assert!(p.after_alloc(101, &ctx));
        assert!(!p.after_alloc(
            500,
            &PurgeCtx {
                lazy_pages: 0,
                ..ctx
            }
        ));
        assert!(!p.after_free(&ctx));
    }
}
