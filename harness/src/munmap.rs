//! `harness munmap` (SPEC.md story 2): map a few pages inside a huge range,
//! unmap the whole range, per `ZapBudget` policy and layout.
//!
//! The 2005 case is `--arch ia64-sim --size 17592182882304 --budget address`
//! against `--budget work`: the range is untouched (no table below the root
//! covers it), so every entry the walker visits is overhead. The ppc64 figure
//! is `--size 1T --touch-pages 4 --repeat 1000`.

use crate::arch::{Arch, with_layout};
use crate::cli::Common;
use crate::zap_common::{parse_size, range_start};
use arch_api::{FrameSource, PageTableLayout, PhysArena, SoftTlb, TlbStats, VirtAddr};
use clap::{Args, ValueEnum};
use serde_json::json;
use std::time::Instant;
use zap_walker::{
    AddressBudget, BreakInfo, Frames, Gather, MapFlags, Unbounded, WalkStats, Walker, WorkBudget,
    ZapBudget,
};

/// `--budget`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BudgetKind {
    /// The 2005 fix: abstract work units, break when spent.
    Work,
    /// Pre-2005: fixed address blocks, re-descending from the root for each.
    Address,
    /// No breaks.
    Unbounded,
}

/// Flags of `munmap`.
#[derive(Args, Clone, Debug)]
pub struct MunmapArgs {
    /// Page-table layout.
    #[arg(long, value_enum, default_value = "ia64-sim")]
    pub arch: Arch,
    /// Bytes to map and unmap (suffixes K M G T).
    #[arg(long, default_value = "17592182882304", value_parser = parse_size)]
    pub size: u64,
    /// How unmap work is counted and when to break.
    #[arg(long, value_enum, default_value = "work")]
    pub budget: BudgetKind,
    /// Pages mapped inside the range before each unmap, spread evenly over it.
    #[arg(long, default_value_t = 0)]
    pub touch_pages: u64,
    /// Map+unmap cycles.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub repeat: u64,
    /// ZAP_BLOCK_SIZE under preemption (8 pages) or not (1024 pages).
    #[arg(long, value_enum, default_value = "on")]
    pub preempt: OnOff,
    /// Put the touched pages next to each other at the start of the range
    /// instead of spreading them.
    #[arg(long)]
    pub packed: bool,
    /// Zeroed table pages the walker keeps per level for the next map
    /// (Linux's old page-table quicklists); 0 returns every freed table to
    /// the frame source, and each map allocates and zeroes them again.
    #[arg(long, default_value_t = 16)]
    pub table_stock: u64,
    /// Which remote CPUs a flush interrupts: `mm` (the default: story 2 is
    /// a user process's munmap, and Linux's `flush_tlb_mm_range` interrupts
    /// only the CPUs in the mm's cpumask, i.e. those that may hold a
    /// translation of the range; this one-thread workload touches nothing
    /// from another CPU, so none) or `all` (every other CPU, as for global
    /// kernel mappings such as vmalloc's).
    #[arg(long, value_enum, default_value = "mm")]
    pub tlb_cpumask: CpuMask,
}

/// `--tlb-cpumask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CpuMask {
    /// Every other CPU gets a shootdown IPI.
    All,
    /// Only CPUs that may hold a translation of the range.
    Mm,
}

/// An on/off flag value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

struct Outcome {
    wall_ns: u64,
    unmap_ns: u64,
    stats: WalkStats,
    leaked_tables: u64,
    tlb: TlbStats,
    flushes: u64,
    pagetable_bytes_peak: u64,
    tables_from_stock: u64,
    tables_allocated: u64,
}

fn run_on<L: PageTableLayout>(a: &MunmapArgs, common: &Common) -> Result<Outcome, String> {
    let ps = L::PAGE_SIZE;
    let start = range_start::<L>(a.size).ok_or_else(|| {
        format!(
            "--size {} does not fit in the canonical space of {}",
            a.size,
            L::NAME
        )
    })?;
    let size = a.size.div_ceil(ps) * ps;
    let touch = a.touch_pages.min(size / ps);
    let arena = PhysArena::new((touch * ps + (64 << 20)).max(256 << 20), 4096)
        .map_err(|e| e.to_string())?;
    let tlb = SoftTlb::new(common.cpus as usize, ps, common.cost_model())
        .with_cpumask_shootdown(a.tlb_cpumask == CpuMask::Mm);
    let mut gather: Gather<_> = Gather::new(tlb.on(0)).with_chain(zap_walker::MAX_CHAIN_PAGES);
    let mut w = Walker::<L, _>::new(&arena).map_err(|e| e.to_string())?;
    w.set_table_stock(a.table_stock)
        .map_err(|e| e.to_string())?;
    let preempt = a.preempt == OnOff::On;
    let pages: Vec<u64> = (0..touch)
        .map(|i| {
            if a.packed {
                start + i * ps
            } else {
                start + (size / touch.max(1) * i) / ps * ps
            }
        })
        .collect();
    let mut frames = Vec::with_capacity(pages.len());
    let mut total = WalkStats::default();
    let mut unmap_ns = 0u64;
    let mut peak = 0u64;
    let t0 = Instant::now();
    for _ in 0..a.repeat {
        for &p in &pages {
            frames.clear();
            frames.push(arena.alloc(ps, ps).map_err(|e| e.to_string())?);
            w.map_range(
                VirtAddr::new(p),
                Frames::List(&frames),
                MapFlags::WRITE | MapFlags::GLOBAL,
            )
            .map_err(|e| e.to_string())?;
        }
        peak = peak.max(w.pagetable_bytes());
        let u0 = Instant::now();
        let r = match a.budget {
            BudgetKind::Work => zap(
                &mut w,
                start,
                size,
                &mut WorkBudget::for_page_size(ps, preempt).with_hook(cond_resched),
                &mut gather,
            ),
            BudgetKind::Address => zap(
                &mut w,
                start,
                size,
                &mut AddressBudget::for_page_size(ps, preempt).with_hook(cond_resched),
                &mut gather,
            ),
            BudgetKind::Unbounded => zap(&mut w, start, size, &mut Unbounded::new(ps), &mut gather),
        }?;
        unmap_ns += u0.elapsed().as_nanos() as u64;
        total.entries_visited += r.entries_visited;
        total.lock_breaks += r.lock_breaks;
        total.budget_units += r.budget_units;
        total.max_work_between_breaks =
            total.max_work_between_breaks.max(r.max_work_between_breaks);
        total.descents += r.descents;
        total.tables_freed += r.tables_freed;
        total.leaves_cleared += r.leaves_cleared;
    }
    let wall_ns = t0.elapsed().as_nanos() as u64;
    let ws = w.stats();
    // Every frame is back and the arena holds exactly the page-table memory
    // the walker accounts for (stock included), then, once the stock is
    // drained, the root(s) alone.
    let check = |w: &Walker<'_, L, PhysArena>| {
        if arena.bytes_in_use() == w.pagetable_bytes() {
            Ok(())
        } else {
            Err(format!(
                "the arena holds {} bytes, the walker accounts for {}",
                arena.bytes_in_use(),
                w.pagetable_bytes()
            ))
        }
    };
    check(&w)?;
    w.drain_table_stock().map_err(|e| e.to_string())?;
    check(&w)?;
    let leaked = w.tables_below_root();
    Ok(Outcome {
        wall_ns,
        unmap_ns,
        stats: total,
        leaked_tables: leaked,
        tlb: tlb.stats(),
        flushes: gather.stats().flushes,
        pagetable_bytes_peak: peak,
        tables_from_stock: ws.tables_from_stock,
        tables_allocated: ws.tables_allocated,
    })
}

/// What a kernel's `cond_resched` would be; the harness is one thread, so
/// there is nobody to yield to: an empty call the optimiser cannot remove.
fn cond_resched(info: &BreakInfo) {
    std::hint::black_box(info);
}

fn zap<L: PageTableLayout, B: ZapBudget, T: arch_api::TlbFlush>(
    w: &mut Walker<'_, L, PhysArena>,
    start: u64,
    size: u64,
    b: &mut B,
    g: &mut Gather<T>,
) -> Result<WalkStats, String> {
    w.zap_range(VirtAddr::new(start), VirtAddr::new(start + size), b, g)
        .map_err(|e| e.to_string())
}

/// Runs the workload; returns the exit status.
pub fn run(common: &Common, a: &MunmapArgs) -> i32 {
    let arch_name = with_layout!(a.arch, L => L::NAME);
    let out = match with_layout!(a.arch, L => run_on::<L>(a, common)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("munmap: {e}");
            return 2;
        }
    };
    let budget = match a.budget {
        BudgetKind::Work => "work",
        BudgetKind::Address => "address",
        BudgetKind::Unbounded => "unbounded",
    };
    let s = &out.stats;
    if common.json {
        println!(
            "{}",
            json!({
                "arch": arch_name,
                "size": a.size,
                "budget": budget,
                "repeat": a.repeat,
                "touch_pages": a.touch_pages,
                "preempt": a.preempt == OnOff::On,
                "wall_ns": out.wall_ns,
                "unmap_ns": out.unmap_ns,
                "entries_visited": s.entries_visited,
                "lock_breaks": s.lock_breaks,
                "max_work_between_breaks": s.max_work_between_breaks,
                "budget_units": s.budget_units,
                "descents": s.descents,
                "leaves_cleared": s.leaves_cleared,
                "tables_freed": s.tables_freed,
                "pagetable_bytes_peak": out.pagetable_bytes_peak,
                "map_ns": out.wall_ns - out.unmap_ns,
                "tlb_flush_events": out.flushes,
                "tlb_full_flushes": out.tlb.full_flushes,
                "tlb_pages_flushed": out.tlb.pages_flushed,
                "ipis": out.tlb.ipis,
                "tlb_cost_ns": out.tlb.cost_ns,
                "tlb_cpumask": match a.tlb_cpumask { CpuMask::All => "all", CpuMask::Mm => "mm" },
                "table_stock": a.table_stock,
                "tables_allocated": out.tables_allocated,
                "tables_from_stock": out.tables_from_stock,
                "leaked_tables": out.leaked_tables,
            })
        );
    } else {
        println!(
            "munmap  arch={arch_name} size={} budget={budget} repeat={} touch_pages={}",
            a.size, a.repeat, a.touch_pages
        );
        println!(
            "  wall            {:>16} ns (unmap {} ns, modelled TLB cost {} ns)",
            out.wall_ns, out.unmap_ns, out.tlb.cost_ns
        );
        println!(
            "  TLB             {:>16} flushes ({} full, {} pages, {} IPIs)",
            out.flushes, out.tlb.full_flushes, out.tlb.pages_flushed, out.tlb.ipis
        );
        println!(
            "  tables          {:>16} allocated ({} from the stock of {} per level)",
            out.tables_allocated, out.tables_from_stock, a.table_stock
        );
        println!("  entries visited {:>16}", s.entries_visited);
        println!(
            "  lock breaks     {:>16}   max work between breaks {}",
            s.lock_breaks, s.max_work_between_breaks
        );
        println!("  budget units    {:>16}", s.budget_units);
        println!("  leaked tables   {:>16}", out.leaked_tables);
    }
    if out.leaked_tables != 0 { 1 } else { 0 }
}
