//! `harness vmalloc-loop` (SPEC.md story 1): N x (vmalloc k pages, write
//! every page through the software MMU, vfree), per policy, side by side.
//!
//! The "touch" writes one byte per page through the page table
//! (`Vmalloc::write_byte_owned`, one lock-free translation) and records the
//! translations in the software TLB of simulated CPU `i % cpus`
//! (`SoftTlb::touch_range`, one lock for the area's pages). Every allocation
//! is checked by the stale-TLB checker; after the loop a final purge must
//! leave no frame and no lazy page behind.
//! Exit status 1 on any violation or leak.

use crate::arch::{Arch, with_layout};
use crate::cli::Common;
use arch_api::{HostedCpus, PageTableLayout, PhysArena, SoftTlb, VirtAddr};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use std::time::Instant;
use vmap_core::{Augmented, FreeAreaSearch, FreeVmapCache, Linear};
use vmap_lazy::testing::Hosted;
use vmap_lazy::{
    Eager, LazyMaxPages, LookupCost, OneSpace, PurgePolicy, StaleTlbChecker, VmFlags, Vmalloc,
    VmallocMem,
};

/// `--policy`, in the order of the story.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LoopPolicy {
    /// Linux 2.6.34: linear search + lazy-max-pages.
    Vanilla,
    /// Linear search + purge on every vfree (lazy freeing off).
    Eager,
    /// The 2010 fix: free area cache + lazy-max-pages.
    FreeAreaCache,
    /// Augmented free tree (Linux since 5.2) + lazy-max-pages.
    Augmented,
    /// Linear search + purge when a lookup visited more than N nodes.
    LookupCost,
    /// All of the above, in that order.
    All,
}

const ORDER: [LoopPolicy; 5] = [
    LoopPolicy::Vanilla,
    LoopPolicy::Eager,
    LoopPolicy::FreeAreaCache,
    LoopPolicy::Augmented,
    LoopPolicy::LookupCost,
];

impl LoopPolicy {
    fn name(self) -> &'static str {
        match self {
            LoopPolicy::Vanilla => "vanilla",
            LoopPolicy::Eager => "eager",
            LoopPolicy::FreeAreaCache => "free-area-cache",
            LoopPolicy::Augmented => "augmented",
            LoopPolicy::LookupCost => "lookup-cost",
            LoopPolicy::All => "all",
        }
    }
}

/// Flags of `vmalloc-loop`.
#[derive(Args, Clone, Debug)]
pub struct VmallocLoopArgs {
    /// Policy to run.
    #[arg(long, value_enum, default_value = "all")]
    pub policy: LoopPolicy,
    /// Loop iterations per policy.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub iterations: u64,
    /// Pages per vmalloc.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub pages: u64,
    /// Page-table layout.
    #[arg(long, value_enum, default_value = "x86_64")]
    pub arch: Arch,
    /// The lookup-cost policy's N (nodes visited by one search).
    #[arg(long, default_value_t = LookupCost::DEFAULT_MAX_NODES)]
    pub lookup_cost_nodes: u32,
    /// Areas without the guard page after them (`VM_NO_GUARD`), to compare
    /// what guards cost.
    #[arg(long)]
    pub no_guard: bool,
}

/// Size of the vmalloc range the loop allocates from.
const RANGE_BYTES: u64 = 64 << 30;

/// A canonical `[start, start + RANGE_BYTES)` below the root's first entry.
fn vmalloc_range<L: PageTableLayout>() -> Option<(u64, u64)> {
    let base = if L::NAME == "ia64-sim" {
        (5u64 << 61) + L::entry_span(1)
    } else {
        L::entry_span(1)
    };
    let end = base.checked_add(RANGE_BYTES)?;
    let span0 = L::entry_span(0);
    let mut a = base;
    while a < end {
        if !L::is_canonical(VirtAddr::new(a)) {
            return None;
        }
        a = (a & !(span0 - 1)).checked_add(span0)?;
    }
    L::is_canonical(VirtAddr::new(end - 1)).then_some((base, end))
}

/// One run's results (HARNESS.md keys) and whether it was clean.
fn run_one<L: PageTableLayout, P: PurgePolicy, F: FreeAreaSearch>(
    common: &Common,
    args: &VmallocLoopArgs,
    name: &str,
    policy: P,
) -> Result<(Value, bool), String> {
    let ps = L::PAGE_SIZE;
    let (vstart, vend) =
        vmalloc_range::<L>().ok_or_else(|| format!("{}: no canonical vmalloc range", L::NAME))?;
    let arena_bytes = (args.pages * ps * 4).max(64 << 20);
    let arena = PhysArena::new(arena_bytes, ps).map_err(|e| e.to_string())?;
    let mem = VmallocMem::new(&arena);
    let cpus = common.cpus as usize;
    let tlb = SoftTlb::new(cpus, ps, common.cost_model());
    let checker = StaleTlbChecker::new(&tlb);
    let window = OneSpace::<Hosted<'_, L>, F>::new(VirtAddr::new(vstart), VirtAddr::new(vend), ps)
        .map_err(|e| e.to_string())?;
    // The loop runs on CPU 0 of a `--cpus` machine (lazy_max_pages and the
    // IPI count follow the count).
    HostedCpus::run_on(0);
    let mut v: Vmalloc<'_, Hosted<'_, L>, P, OneSpace<Hosted<'_, L>, F>> =
        Vmalloc::new(&mem, window, tlb.on(0), HostedCpus::new(cpus), policy)
            .map_err(|e| e.to_string())?;
    v.set_alloc_check(&checker);
    let size = args.pages * ps;
    let flags = if args.no_guard {
        VmFlags::NO_GUARD
    } else {
        VmFlags::empty()
    };
    let t0 = Instant::now();
    for i in 0..args.iterations {
        let a = v
            .vmalloc_with(size, ps, flags, "vmalloc")
            .map_err(|e| format!("{name}: vmalloc: {e}"))?;
        let cpu = (i as usize) % cpus;
        for p in 0..args.pages {
            let va = VirtAddr::new(a.as_u64() + p * ps);
            // SAFETY: `a` was just vmalloc'd by this thread, which alone
            // uses and frees it (below, after the touch); `va` lies in it.
            unsafe { v.write_byte_owned(va, i as u8) }
                .map_err(|e| format!("{name}: touch: {e}"))?;
        }
        tlb.touch_range(cpu, a, VirtAddr::new(a.as_u64() + size));
        v.vfree(a).map_err(|e| format!("{name}: vfree: {e}"))?;
    }
    let wall_ns = t0.elapsed().as_nanos() as u64;
    let s = v.stats();
    let t = tlb.stats();
    // After the loop: purge what is still lazy, then nothing may remain.
    v.purge_vmap_area_lazy();
    let leaked_pages = (mem.bytes_out() - v.pagetable_bytes()) / ps + v.vmap_lazy_nr();
    let consistent = v.check_consistency().is_ok() && v.areas().is_empty();
    let violations = checker.violations();
    let clean = violations == 0 && leaked_pages == 0 && consistent && s.lazy_underflows == 0;
    let avg = if s.allocs == 0 {
        0.0
    } else {
        s.nodes_visited as f64 / s.allocs as f64
    };
    Ok((
        json!({
            "policy": name,
            "search": F::NAME,
            "purge_policy": P::NAME,
            "arch": L::NAME,
            "iterations": args.iterations,
            "pages": args.pages,
            "cpus": common.cpus,
            "wall_ns": wall_ns,
            "ns_per_iter": wall_ns / args.iterations,
            "nodes_visited_avg": (avg * 100.0).round() / 100.0,
            "nodes_visited_max": s.nodes_visited_max,
            "tlb_flush_events": t.flush_events,
            "tlb_pages_flushed": t.pages_flushed,
            "tlb_full_flushes": t.full_flushes,
            "ipis": t.ipis,
            "tlb_cost_ns": t.cost_ns,
            "purges": s.purges,
            "stale_tlb_violations": violations,
            "leaked_pages": leaked_pages,
            "lazy_underflows": s.lazy_underflows,
            "consistent": consistent,
            "guard": !args.no_guard,
            "pagetable_bytes": v.pagetable_bytes(),
        }),
        clean,
    ))
}

fn run_policy<L: PageTableLayout>(
    common: &Common,
    args: &VmallocLoopArgs,
    p: LoopPolicy,
) -> Result<(Value, bool), String> {
    let n = p.name();
    match p {
        LoopPolicy::Vanilla => run_one::<L, LazyMaxPages, Linear>(common, args, n, LazyMaxPages),
        LoopPolicy::Eager => run_one::<L, Eager, Linear>(common, args, n, Eager),
        LoopPolicy::FreeAreaCache => {
            run_one::<L, LazyMaxPages, FreeVmapCache>(common, args, n, LazyMaxPages)
        }
        LoopPolicy::Augmented => {
            run_one::<L, LazyMaxPages, Augmented>(common, args, n, LazyMaxPages)
        }
        LoopPolicy::LookupCost => run_one::<L, LookupCost, Linear>(
            common,
            args,
            n,
            LookupCost {
                max_nodes: args.lookup_cost_nodes,
            },
        ),
        LoopPolicy::All => Err("`all` is not one policy".into()),
    }
}

/// Runs the loop; returns the exit status.
pub fn run(common: &Common, args: &VmallocLoopArgs) -> i32 {
    let policies: Vec<LoopPolicy> = if args.policy == LoopPolicy::All {
        ORDER.to_vec()
    } else {
        vec![args.policy]
    };
    let mut runs = Vec::new();
    let mut clean = true;
    for p in policies {
        eprintln!("vmalloc-loop: {} ...", p.name());
        let r = with_layout!(args.arch, L => run_policy::<L>(common, args, p));
        match r {
            Ok((v, ok)) => {
                clean &= ok;
                runs.push(v);
            }
            Err(e) => {
                eprintln!("vmalloc-loop: {e}");
                return 1;
            }
        }
    }
    if common.json {
        if args.policy == LoopPolicy::All {
            println!("{}", json!({ "runs": runs }));
        } else {
            println!("{}", runs[0]);
        }
    } else {
        println!(
            "{:<16} {:>12} {:>10} {:>9} {:>9} {:>10} {:>12} {:>10} {:>8} {:>6}",
            "policy",
            "wall_ms",
            "ns/iter",
            "nodes_avg",
            "nodes_max",
            "flushes",
            "pages_flushed",
            "ipis",
            "purges",
            "stale"
        );
        for r in &runs {
            println!(
                "{:<16} {:>12.1} {:>10} {:>9} {:>9} {:>10} {:>12} {:>10} {:>8} {:>6}",
                r["policy"].as_str().unwrap_or(""),
                r["wall_ns"].as_u64().unwrap_or(0) as f64 / 1e6,
                r["ns_per_iter"].to_string(),
                r["nodes_visited_avg"].to_string(),
                r["nodes_visited_max"].to_string(),
                r["tlb_flush_events"].to_string(),
                r["tlb_pages_flushed"].to_string(),
                r["ipis"].to_string(),
                r["purges"].to_string(),
                r["stale_tlb_violations"].to_string(),
            );
        }
    }
    if clean { 0 } else { 1 }
}
