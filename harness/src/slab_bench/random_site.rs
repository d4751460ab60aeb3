//! The random kmalloc copies through a [`RandomSite`]: the copy chosen
//! once for the call site (before the loop), then plain pairs on it; the
//! side-by-side partner of `kmalloc_rnd_pairs` (hash on every call) and
//! `kmalloc_pairs` (no copies).

use slub_core::RandomSite;
use slub_core::testing::HostedPlatform;
use slub_core::{SystemPages, ThreadCpus};
use std::alloc::Layout;
use std::time::Instant;

type Site<'a> = RandomSite<'a, HostedPlatform<&'static SystemPages, ThreadCpus>>;

/// `site.alloc` / `site.free` pairs; ns per pair.
// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
pub(super) fn kmalloc_site_pairs(site: Site<'_>, l: Layout, loops: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..loops {
        let p = site.alloc(l).unwrap_or_else(|_| std::process::abort());
        // SAFETY: allocated just above through `site`, freed once.
        if unsafe { site.free(std::hint::black_box(p), l) }.is_err() {
            std::process::abort();
        }
    }
    t.elapsed().as_nanos() as f64 / loops as f64
}
