//! `harness vmalloc-huge`: one large area (`--size`, 64 MiB by default)
//! vmalloc'd, touched (one byte per page through the software MMU) and
//! vfreed `--iterations` times, with base pages and with
//! `vmalloc_huge` (the layout's large leaves), side by side, each on a
//! vmalloc of its own. Reports the median time of each step and the
//! page-table bytes the area needed (tables are never freed, so the first
//! iteration's growth is the area's). Every area is checked by the
//! stale-TLB checker, every page's translation against the model on the
//! first iteration; after the loop nothing may be left. Exit status 1 on
//! any violation or leak.

use crate::arch::{Arch, with_layout};
use crate::cli::Common;
use crate::zap_common::{parse_size, range_start};
use arch_api::{HostedCpus, PageTableLayout, PhysArena, SoftTlb, VirtAddr};
use clap::Args;
use serde_json::{Value, json};
use std::time::Instant;
use vmap_lazy::testing::Hosted;
use vmap_lazy::{LazyMaxPages, OneSpace, StaleTlbChecker, VmFlags, Vmalloc, VmallocMem};

/// Flags of `vmalloc-huge`.
#[derive(Args, Clone, Debug)]
pub struct VmallocHugeArgs {
    /// Bytes per area (K, M, G suffixes).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub size: u64,
    /// vmalloc / touch / vfree / purge rounds per mode.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub iterations: u64,
    /// Page-table layout.
    #[arg(long, value_enum, default_value = "x86_64")]
    pub arch: Arch,
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// One mode's run: (results, clean).
fn run_mode<L: PageTableLayout>(
    common: &Common,
    args: &VmallocHugeArgs,
    huge: bool,
) -> Result<(Value, bool), String> {
    let ps = L::PAGE_SIZE;
    let size = args.size.div_ceil(ps) * ps;
    let pages = size / ps;
    let window = (size * 4).max(1 << 32);
    let vstart = range_start::<L>(window)
        .ok_or_else(|| format!("{}: no canonical range of {window} bytes", L::NAME))?;
    let arena = PhysArena::new(size * 2 + (16 << 20), ps).map_err(|e| e.to_string())?;
    let mem = VmallocMem::new(&arena);
    let cpus = common.cpus as usize;
    let tlb = SoftTlb::new(cpus, ps, common.cost_model());
    let checker = StaleTlbChecker::new(&tlb);
    let space =
        OneSpace::<Hosted<'_, L>>::new(VirtAddr::new(vstart), VirtAddr::new(vstart + window), ps)
            .map_err(|e| e.to_string())?;
    HostedCpus::run_on(0);
    let mut v: Vmalloc<'_, Hosted<'_, L>> =
        Vmalloc::new(&mem, space, tlb.on(0), HostedCpus::new(cpus), LazyMaxPages)
            .map_err(|e| e.to_string())?;
    v.set_alloc_check(&checker);
    let flags = if huge {
        VmFlags::HUGE
    } else {
        VmFlags::empty()
    };
    let name = if huge { "huge" } else { "base" };
    let e = |what: &str, err: vmap_lazy::VmallocError| format!("{name}: {what}: {err}");
    let pt0 = v.pagetable_bytes();
    let (mut t_alloc, mut t_touch, mut t_free, mut t_purge) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut pt_area, mut leaves, mut saved, mut mismatches) = (0, ((0, 0), (0, 0)), 0, 0u64);
    for i in 0..args.iterations {
        let t = Instant::now();
        let a = v
            .vmalloc_with(size, ps, flags, "vmalloc_huge_test")
            .map_err(|x| e("vmalloc", x))?;
        t_alloc.push(t.elapsed().as_nanos() as u64);
        if i == 0 {
            pt_area = v.pagetable_bytes() - pt0;
            let info = v.areas()[0];
            leaves = info.leaves();
            saved = v.stats().pagetable_bytes_saved;
            // The model: every page translates, inside its leaf's frame.
            let ((large, n), _) = leaves;
            for p in 0..pages {
                let va = VirtAddr::new(a.as_u64() + p * ps);
                let ok = v.translate(va).is_some_and(|t| {
                    // The area is aligned: its large leaves come first.
                    let want = if p * ps < n * large { large } else { ps };
                    t.size == want && t.phys.as_u64() == t.frame.as_u64() + va.as_u64() % t.size
                });
                mismatches += u64::from(!ok);
            }
        }
        let t = Instant::now();
        for p in 0..pages {
            let va = VirtAddr::new(a.as_u64() + p * ps);
            // SAFETY: `a` was just vmalloc'd by this thread, which alone
            // uses and frees it (below); `va` lies in it.
            unsafe { v.write_byte_owned(va, i as u8) }.map_err(|x| e("touch", x))?;
        }
        t_touch.push(t.elapsed().as_nanos() as u64);
        tlb.touch_range(i as usize % cpus, a, VirtAddr::new(a.as_u64() + size));
        let t = Instant::now();
        v.vfree(a).map_err(|x| e("vfree", x))?;
        t_free.push(t.elapsed().as_nanos() as u64);
        let t = Instant::now();
        v.purge_vmap_area_lazy();
        t_purge.push(t.elapsed().as_nanos() as u64);
    }
    let s = v.stats();
    let leaked_pages = (mem.bytes_out() - v.pagetable_bytes()) / ps + v.vmap_lazy_nr();
    let consistent = v.check_consistency().is_ok() && v.areas().is_empty();
    let violations = checker.violations();
    let clean = violations == 0 && leaked_pages == 0 && consistent && mismatches == 0;
    let total: Vec<u64> = (0..t_alloc.len())
        .map(|i| t_alloc[i] + t_touch[i] + t_free[i] + t_purge[i])
        .collect();
    let ((large, n_large), (_, n_base)) = leaves;
    Ok((
        json!({
            "mode": name,
            "arch": L::NAME,
            "size": size,
            "iterations": args.iterations,
            "large_leaf_bytes": large,
            "large_leaves": n_large,
            "base_pages": n_base,
            "vmalloc_ns": median(t_alloc),
            "touch_ns": median(t_touch),
            "vfree_ns": median(t_free),
            "purge_ns": median(t_purge),
            "ns_per_iter": median(total),
            "pagetable_bytes": pt_area,
            "pagetable_bytes_saved": saved,
            "huge_fallbacks": s.huge_fallbacks,
            "mismatches": mismatches,
            "stale_tlb_violations": violations,
            "leaked_pages": leaked_pages,
            "consistent": consistent,
        }),
        clean,
    ))
}

/// Runs both modes; returns the exit status.
pub fn run(common: &Common, args: &VmallocHugeArgs) -> i32 {
    let mut runs = Vec::new();
    let mut clean = true;
    for huge in [false, true] {
        match with_layout!(args.arch, L => run_mode::<L>(common, args, huge)) {
            Ok((v, ok)) => {
                clean &= ok;
                runs.push(v);
            }
            Err(e) => {
                eprintln!("vmalloc-huge: {e}");
                return 1;
            }
        }
    }
    if common.json {
        println!("{}", json!({ "runs": runs }));
    } else {
        println!(
            "{:<5} {:>10} {:>8} {:>8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10}",
            "mode",
            "size",
            "large",
            "base",
            "vmalloc_ns",
            "touch_ns",
            "vfree_ns",
            "purge_ns",
            "ns/iter",
            "pt_bytes"
        );
        for r in &runs {
            let n = |k: &str| r[k].as_u64().unwrap_or(0);
            println!(
                "{:<5} {:>10} {:>8} {:>8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10}",
                r["mode"].as_str().unwrap_or(""),
                n("size"),
                n("large_leaves"),
                n("base_pages"),
                n("vmalloc_ns"),
                n("touch_ns"),
                n("vfree_ns"),
                n("purge_ns"),
                n("ns_per_iter"),
                n("pagetable_bytes"),
            );
        }
    }
    if clean { 0 } else { 1 }
}
