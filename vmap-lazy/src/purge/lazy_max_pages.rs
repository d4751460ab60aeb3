//! `lazy-max-pages` (default): purge once `vmap_lazy_nr` exceeds
//! `fls(cpus) × 32 MiB` worth of pages, as Linux's `lazy_max_pages()`: the
//! batch grows with the number of CPUs, because each flush interrupts them all.

use super::{PurgeCtx, PurgePolicy};

/// Linux's threshold unit: 32 MiB of lazily freed pages per `fls(cpus)`.
pub const LAZY_UNIT_BYTES: u64 = 32 << 20;

/// Find last set bit, 1-based (`fls(0) == 0`, `fls(8) == 4`).
pub(crate) const fn fls(x: u32) -> u32 {
    32 - x.leading_zeros()
}

/// `lazy_max_pages()`: `fls(cpus) × 32 MiB / page_size` pages.
pub const fn lazy_max_pages(cpus: u32, page_size: u64) -> u64 {
    fls(cpus) as u64 * (LAZY_UNIT_BYTES / page_size)
}

/// Purge when `vmap_lazy_nr > lazy_max_pages()`.
#[derive(Clone, Copy, Debug, Default)]
pub struct LazyMaxPages;

impl PurgePolicy for LazyMaxPages {
    const NAME: &'static str = "lazy-max-pages";

    fn after_free(&self, ctx: &PurgeCtx) -> bool {
        ctx.lazy_pages > lazy_max_pages(ctx.cpus, ctx.page_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_grows_with_fls_of_cpus() {
        assert_eq!(fls(0), 0);
        assert_eq!(fls(1), 1);
        assert_eq!(fls(8), 4);
        assert_eq!(fls(9), 4);
        assert_eq!(lazy_max_pages(1, 4096), 8192);
        assert_eq!(lazy_max_pages(8, 4096), 4 * 8192);
        let ctx = |lazy_pages| PurgeCtx {
            lazy_pages,
            cpus: 8,
            page_size: 4096,
        };
        assert!(!LazyMaxPages.after_free(&ctx(32768)));
        assert!(LazyMaxPages.after_free(&ctx(32769)));
    }
}
