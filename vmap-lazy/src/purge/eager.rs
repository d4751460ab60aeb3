//! `eager`: purge on every `vfree` (the 2010 workaround: lazy freeing off).
//! Every free costs one flush and a shootdown of every other CPU.

use super::{PurgeCtx, PurgePolicy};

/// Purge after every free.
#[derive(Clone, Copy, Debug, Default)]
pub struct Eager;

impl PurgePolicy for Eager {
    const NAME: &'static str = "eager";

    fn after_free(&self, ctx: &PurgeCtx) -> bool {
        ctx.lazy_pages > 0
    }
}
