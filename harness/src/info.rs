//! `harness info`: the configured architectures, layouts and TLB model.

use crate::arch::{Arch, host_dwcas_name, with_layout};
use crate::cli::Common;
use arch_api::{LayoutInfo, PageTableLayout, SoftTlb, TlbFlush, VirtAddr};
use serde_json::{Value, json};

fn layout_info(arch: Arch) -> LayoutInfo {
    with_layout!(arch, L => L::info())
}

fn layout_json(i: &LayoutInfo) -> Value {
    json!({
        "name": i.name,
        "levels": i.levels,
        "page_size": i.page_size,
        "va_bits": i.va_bits,
        "index_bits": i.index_bits,
        "entry_span": (0..i.levels).map(|l| i.entry_span(l)).collect::<Vec<_>>(),
        "leaf_levels": (0..i.levels).filter(|l| i.leaf_levels & (1 << l) != 0).collect::<Vec<_>>(),
    })
}

fn human(bytes: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (1 << 60, "E"),
        (1 << 50, "P"),
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (size, unit) in UNITS {
        if bytes >= size && bytes % size == 0 {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}")
}

/// Prints the configuration; also exercises the TLB model once so the printed
/// accounting is what the model really does (one range flush of 8 pages from
/// CPU 0, and one above the ceiling).
pub fn run(common: &Common, arch: Option<Arch>) -> i32 {
    let arches: Vec<Arch> = arch.map_or(Arch::ALL.to_vec(), |a| vec![a]);
    let layouts: Vec<LayoutInfo> = arches.iter().map(|&a| layout_info(a)).collect();
    let cost = common.cost_model();
    let tlb = SoftTlb::new(common.cpus as usize, 4096, cost);
    let base = VirtAddr::new(0xffff_c900_0000_0000);
    for cpu in 0..tlb.cpus() {
        tlb.touch(cpu, base);
    }
    let flusher = tlb.on(0);
    flusher.flush_range(base, VirtAddr::new(base.as_u64() + 8 * 4096), 4096);
    let after_range = tlb.stats();
    flusher.flush_range(base, VirtAddr::new(base.as_u64() + 64 * 4096), 4096);
    let after_full = tlb.stats();

    if common.json {
        let out = json!({
            "layouts": layouts.iter().map(layout_json).collect::<Vec<_>>(),
            "dwcas": host_dwcas_name(),
            "tlb_model": {
                "cpus": tlb.cpus(),
                "flush_ceiling_pages": flusher.flush_ceiling_pages(),
                "flush_cost_ns": cost.page_flush_ns,
                "full_flush_cost_ns": cost.full_flush_ns,
                "ipi_cost_ns": cost.ipi_ns,
                "example_range_flush_8_pages": {
                    "tlb_flush_events": after_range.flush_events,
                    "tlb_pages_flushed": after_range.pages_flushed,
                    "ipis": after_range.ipis,
                    "tlb_cost_ns": after_range.cost_ns,
                },
                "example_range_flush_64_pages": {
                    "full_flushes": after_full.full_flushes - after_range.full_flushes,
                    "tlb_cost_ns": after_full.cost_ns - after_range.cost_ns,
                },
            },
        });
        println!("{out}");
        return 0;
    }

    println!("Page-table layouts (level 0 = root)");
    println!(
        "{:<12} {:>6} {:>5} {:>7}  {:<22} {:<32} leaves at",
        "arch", "levels", "page", "va_bits", "index bits", "entry span per level"
    );
    for i in &layouts {
        let spans: Vec<String> = (0..i.levels).map(|l| human(i.entry_span(l))).collect();
        let leaves: Vec<String> = (0..i.levels)
            .filter(|l| i.leaf_levels & (1 << l) != 0)
            .map(|l| format!("{l} ({})", human(i.entry_span(l))))
            .collect();
        println!(
            "{:<12} {:>6} {:>5} {:>7}  {:<22} {:<32} {}",
            i.name,
            i.levels,
            human(i.page_size),
            i.va_bits,
            format!("{:?}", i.index_bits),
            spans.join(" / "),
            leaves.join(", ")
        );
    }
    println!();
    println!("Double-word CAS on this host: {}", host_dwcas_name());
    println!();
    println!(
        "Software TLB model: {} simulated CPUs, flush ceiling {} pages",
        tlb.cpus(),
        flusher.flush_ceiling_pages()
    );
    println!(
        "  charged: {} ns per single-page invalidation, {} ns per full flush, {} ns per IPI to a remote CPU",
        cost.page_flush_ns, cost.full_flush_ns, cost.ipi_ns
    );
    println!(
        "  8-page range flush from CPU 0: {} event, {} pages, {} IPIs, {} ns charged",
        after_range.flush_events, after_range.pages_flushed, after_range.ipis, after_range.cost_ns
    );
    println!(
        "  64-page range flush (above the ceiling): {} full flush, {} ns charged",
        after_full.full_flushes - after_range.full_flushes,
        after_full.cost_ns - after_range.cost_ns
    );
    0
}
