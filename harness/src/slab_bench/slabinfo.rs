//! `harness slabinfo`: a short workload on the kmalloc caches, a bucket set and (`--hardened`)
//! the random kmalloc copies, with deferred frees held up by a reader, then the dump.

use super::{SlubCache, cycles, emit};
use crate::cli::Common;
use clap::Args;
use serde_json::json;
use slub_core::testing::{EpochGracePeriod, HostedPlatform};
use slub_core::{CacheFlags, Kmalloc, RandomKmalloc, SystemPages, ThreadCpus};
use std::alloc::Layout;

/// `slabinfo` flags.
#[derive(Args, Debug, Clone)]
pub struct SlabinfoArgs {
    /// Use the sheaves front.
    #[arg(long)]
    pub sheaves: bool,
    /// Also show a dedicated bucket set (`kmem_buckets_create`) and the
    /// random kmalloc copies (`CONFIG_RANDOM_KMALLOC_CACHES`) in use.
    #[arg(long)]
    pub hardened: bool,
}

/// `slabinfo`: a short workload on the kmalloc caches and a dedicated bucket
/// set (`kmem_buckets_create`), with deferred frees (`kfree_rcu`) held up by
/// a reader, then the dump. Each line ends with the cache's deferred frees
/// pending (`: deferred <pending>`); bucket-set caches are named as Linux
/// names them (`<set>-<size>`, e.g. `harness-buckets-64`).
pub fn slabinfo(common: &Common, a: &SlabinfoArgs) -> i32 {
    let pages: &'static SystemPages = Box::leak(Box::new(SystemPages::new()));
    let flags = if a.sheaves {
        CacheFlags::SHEAVES
    } else {
        CacheFlags::empty()
    };
    let mut km: Kmalloc<HostedPlatform<&SystemPages, ThreadCpus>> =
        Kmalloc::new(pages, ThreadCpus, flags).unwrap();
    let mut buckets = km.buckets(BUCKET_SET).unwrap();
    let gp = EpochGracePeriod::new();
    let mut held = Vec::new();
    let mut held_b = Vec::new();
    // A reader inside while some objects are deferred: they stay pending
    // until after the dump.
    let reader = gp.read();
    for i in 0..20_000usize {
        let l = Layout::from_size_align(8 << (i % 12), 8).unwrap();
        let p = km.alloc(l).unwrap();
        if i % 3 == 0 {
            held.push((p, l));
        } else if i % 97 == 1 {
            // SAFETY: allocated just above, unpublished, freed once.
            unsafe { km.free_deferred(p, l, &gp) }.unwrap();
        } else {
            // SAFETY: allocated just above.
            unsafe { km.free(p, l) }.unwrap();
        }
    }
    for i in 0..600usize {
        let l = Layout::from_size_align(64 << (i % 3), 8).unwrap();
        let p = buckets.alloc(l).unwrap();
        if i % 10 == 0 {
            // SAFETY: allocated just above from `buckets`, freed once.
            unsafe { buckets.free_deferred(p, l, &gp) }.unwrap();
        } else {
            held_b.push((p, l));
        }
    }
    // A large (page-source) block deferred too.
    let big = Layout::from_size_align(64 << 10, 8).unwrap();
    let p = km.alloc(big).unwrap();
    // SAFETY: allocated just above, unpublished, freed once.
    unsafe { km.free_deferred(p, big, &gp) }.unwrap();
    // Every partial batch handed over, so what is pending waits for the
    // reader only.
    km.flush_deferred(&gp);
    buckets.flush_deferred(&gp);
    let line = |set: &str, name: String, c: &SlubCache| SlabLine {
        set: set.to_string(),
        name,
        info: c.slabinfo(),
        deferred: c.deferred_pending(),
    };
    let mut lines: Vec<_> = km
        .caches()
        .iter()
        .rev()
        .map(|c| line("kmalloc", c.name().to_string(), c))
        .collect();
    // The bucket set's caches holding slabs, then (`--hardened`) the random
    // copies fed by a few keys, after the general ones.
    let used = |c: &SlubCache| c.nr_slabs() > 0;
    lines.extend(
        buckets
            .caches()
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, c)| used(c))
            .map(|(i, c)| {
                let name = bucket_cache_name(BUCKET_SET, slub_core::KMALLOC_MIN_SIZE << i);
                line(BUCKET_SET, name, c)
            }),
    );
    let rk: RandomKmalloc<HostedPlatform<&SystemPages, ThreadCpus>> =
        RandomKmalloc::new(pages, ThreadCpus, flags, cycles()).unwrap();
    let mut held_r = Vec::new();
    if a.hardened {
        for i in 0..600usize {
            let l = Layout::from_size_align(64 << (i % 3), 8).unwrap();
            let key = 0x40_1000 + 40 * (i % 4);
            held_r.push((rk.alloc_caller(l, key).unwrap(), l, key));
        }
        lines.extend(
            rk.copy_caches()
                .iter()
                .filter(|c| used(c))
                .map(|c| line("kmalloc-random", c.name().to_string(), c)),
        );
    }
    let large_deferred = km.large_deferred_pending() + buckets.large_deferred_pending();
    let v = json!({
        "slabinfo": lines.iter().map(|l| { let i = &l.info; json!({"name": l.name, "active_objs": i.active_objs,
            "num_objs": i.num_objs, "objsize": i.objsize, "objperslab": i.objperslab,
            "pagesperslab": i.pagesperslab, "active_slabs": i.active_slabs, "num_slabs": i.num_slabs,
            "set": l.set, "deferred_pending": l.deferred}) }).collect::<Vec<_>>(),
        "bucket_sets": [BUCKET_SET],
        "deferred_pending": km.deferred_pending() + buckets.deferred_pending(),
        "large_deferred_pending": large_deferred,
    });
    let code = emit(common, v, || {
        println!("{} : deferred <pending>", slub_core::SlabInfo::HEADER);
        for l in &lines {
            let info = slub_core::SlabInfo { name: "", ..l.info };
            // `info`'s own name column is 17 wide: ours replaces it.
            let rest = info.to_string();
            println!(
                "{:<17}{} : deferred {:>6}",
                l.name,
                rest.get(17..).unwrap_or(""),
                l.deferred
            );
        }
        println!("# large (page-source) blocks deferred: {large_deferred}");
    });
    drop(reader);
    for (p, l) in held {
        // SAFETY: allocated above, freed once.
        unsafe { km.free(p, l) }.unwrap();
    }
    for (p, l) in held_b {
        // SAFETY: allocated above from `buckets`, freed once.
        unsafe { buckets.free(p, l) }.unwrap();
    }
    for (p, l, key) in held_r {
        // SAFETY: allocated above with `key`, freed once.
        unsafe { rk.free_caller(p, l, key) }.unwrap();
    }
    // The reader has left: every deferred free completes.
    buckets.destroy_deferred(&gp).unwrap();
    km.destroy_deferred(&gp).unwrap();
    code
}

/// The bucket set the `slabinfo` workload uses.
const BUCKET_SET: &str = "harness-buckets";

/// One `slabinfo` line: the set it belongs to, its Linux name, the dump.
struct SlabLine {
    set: String,
    name: String,
    info: slub_core::SlabInfo,
    deferred: usize,
}

/// Linux's name for a bucket set's cache: the set's name and the class's
/// short size (`kmem_buckets_create`: `"%s-%s"`, e.g. `msg_msg-1k`).
pub fn bucket_cache_name(set: &str, size: usize) -> String {
    let short = if size >= 1024 && size % 1024 == 0 {
        format!("{}k", size / 1024)
    } else {
        size.to_string()
    };
    format!("{set}-{short}")
}

#[cfg(test)]
mod tests {
    use super::bucket_cache_name;

    #[test]
    fn bucket_caches_are_named_as_linux_names_them() {
        assert_eq!(bucket_cache_name("msg_msg", 64), "msg_msg-64");
        assert_eq!(bucket_cache_name("msg_msg", 1024), "msg_msg-1k");
        assert_eq!(bucket_cache_name("msg_msg", 16384), "msg_msg-16k");
    }
}
