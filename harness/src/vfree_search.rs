//! `harness vfree-search` (story 5): vfree with one busy-tree search
//! (`find_unlink`) against the pre-2022 find + unlink (two searches). The
//! space holds `--busy` one-page areas; each iteration frees a random area
//! and (untimed) allocates it again, so the tree size stays constant. The
//! search counts come from vmap-core's `stats` counters.

use crate::cli::Common;
use clap::Args;
use serde_json::json;
use std::time::Instant;
use vmap_core::{Augmented, FreeAreaSearch, Linear, VecSource, VirtAddr, VmapError, VmapSpace};

const PAGE: u64 = 4096;
const VSTART: u64 = 0xffff_c900_0000_0000;
const BATCH: usize = 1024;

/// `vfree-search` flags.
#[derive(Args, Debug, Clone)]
pub struct VfreeSearchArgs {
    /// vfree calls per variant.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub iterations: u64,
    /// Busy one-page areas in the tree.
    #[arg(long, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub busy: u64,
    /// Free-space policy: `augmented` (default; vfree also merges into the
    /// free tree) or `linear` (no free tree: vfree is the busy-tree work
    /// alone).
    #[arg(long, value_parser = ["augmented", "linear"], default_value = "augmented")]
    pub policy: String,
    /// Run only one variant (for callgrind): `one` or `two`.
    #[arg(long, value_parser = ["one", "two", "both"], default_value = "both")]
    pub only: String,
}

/// One vfree, one search. Not inlined, so callgrind can count it alone
/// (`--toggle-collect=*vfree_one*`).
#[inline(never)]
pub fn vfree_one<P: FreeAreaSearch>(
    s: &mut VmapSpace<P, VecSource>,
    a: VirtAddr,
) -> Result<(), VmapError> {
    s.find_unlink(a).map(|_| ())
}

/// One vfree, two searches (find, then unlink by address).
#[inline(never)]
pub fn vfree_two<P: FreeAreaSearch>(
    s: &mut VmapSpace<P, VecSource>,
    a: VirtAddr,
) -> Result<(), VmapError> {
    s.free_two_search(a).map(|_| ())
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Returns (ns per vfree, searches per vfree).
type Vfree<P> = fn(&mut VmapSpace<P, VecSource>, VirtAddr) -> Result<(), VmapError>;

fn measure<P: FreeAreaSearch>(
    args: &VfreeSearchArgs,
    seed: u64,
    f: Vfree<P>,
) -> Result<(u64, f64), String> {
    let end = VSTART + (args.busy + 1) * PAGE * 2;
    let mut s = VmapSpace::<P, VecSource>::new(
        VirtAddr::new(VSTART),
        VirtAddr::new(end),
        PAGE,
        VecSource::new(),
    )
    .map_err(|e| e.to_string())?;
    // Every other page, so a freed area has busy-free neighbours like a
    // fragmented vmalloc space.
    for k in 0..args.busy {
        s.alloc_exact(VirtAddr::new(VSTART + 2 * k * PAGE), PAGE)
            .map_err(|e| e.to_string())?;
    }
    s.reset_stats();
    let mut rng = Rng(seed);
    let mut batch = Vec::with_capacity(BATCH);
    let mut done = 0u64;
    let mut ns = 0u128;
    while done < args.iterations {
        let n = (args.iterations - done).min(BATCH as u64) as usize;
        batch.clear();
        while batch.len() < n {
            let a = VirtAddr::new(VSTART + 2 * (rng.next() % args.busy) * PAGE);
            if !batch.contains(&a) || args.busy < BATCH as u64 {
                batch.push(a);
            }
        }
        batch.sort_unstable();
        batch.dedup();
        let t = Instant::now();
        for &a in &batch {
            f(&mut s, a).map_err(|e| e.to_string())?;
        }
        ns += t.elapsed().as_nanos();
        for &a in &batch {
            s.alloc_exact(a, PAGE).map_err(|e| e.to_string())?;
        }
        done += batch.len() as u64;
    }
    let searches = s.stats().free_searches as f64 / done as f64;
    Ok(((ns / u128::from(done)) as u64, searches))
}

/// Runs the comparison; returns the exit status.
pub fn run(common: &Common, args: &VfreeSearchArgs) -> i32 {
    let linear = args.policy == "linear";
    let run_one = |f1: Vfree<Augmented>, f2: Vfree<Linear>| {
        if linear {
            measure(args, common.seed, f2)
        } else {
            measure(args, common.seed, f1)
        }
    };
    let one = (args.only != "two").then(|| run_one(vfree_one, vfree_one));
    let two = (args.only != "one").then(|| run_one(vfree_two, vfree_two));
    let (one, two) = match (one.transpose(), two.transpose()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("vfree-search: {e}");
            return 1;
        }
    };
    let out = json!({
        "iterations": args.iterations,
        "policy": args.policy,
        "busy": args.busy,
        "one_search_ns": one.map(|x| x.0),
        "two_search_ns": two.map(|x| x.0),
        "searches_per_vfree_one": one.map(|x| x.1),
        "searches_per_vfree_two": two.map(|x| x.1),
        "ratio_one_over_two": one.zip(two).map(|(a, b)| a.0 as f64 / b.0.max(1) as f64),
    });
    if common.json {
        println!("{out}");
    } else {
        println!(
            "{:<22} {:>10} {:>18}",
            "variant", "ns/vfree", "searches/vfree"
        );
        if let Some((ns, s)) = one {
            println!("{:<22} {:>10} {:>18.2}", "find_unlink (one)", ns, s);
        }
        if let Some((ns, s)) = two {
            println!("{:<22} {:>10} {:>18.2}", "find + unlink (two)", ns, s);
        }
    }
    0
}
