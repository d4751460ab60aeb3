//! `harness vmallocinfo`: runs a short workload (vmallocs of several sizes,
//! a no-guard area, a stack, a huge area (`vmalloc_huge`: one large leaf
//! and a tail of base pages), a vmap of caller frames, a vm_map_ram
//! mapping, some vfrees left lazy), then dumps the areas like Linux's
//! /proc/vmallocinfo, followed by the counters, so that every kind of line
//! shows. `--json` gives `{"areas":[…],"counters":{…}}`; each area's
//! `start`/`end`/`size` are the range printed (guard pages included),
//! `mapped_start`/`mapped_end` the mapped part, `kind`, `guard` and `state`
//! what the line says; `huge` whether the area asked for large leaves and
//! `leaves` its leaves by size (`[{"size":2097152,"count":1},…]`).

use crate::cli::Common;
use arch_api::{FrameSource, HostedCpus, MapFlags, PhysArena, SoftTlb, VirtAddr};
use serde_json::json;
use vmap_lazy::testing::Hosted;
use vmap_lazy::{InfoLine, LazyMaxPages, OneSpace, VmFlags, Vmalloc, VmallocMem};

type L = arch_x86_64::X86_64Pml4;
type K<'a> = Hosted<'a, L>;
const PAGE: u64 = 4096;
const VSTART: u64 = 0xffff_c900_0000_0000;

/// Runs the workload and prints the listing; returns the exit status.
pub fn run(common: &Common) -> i32 {
    match dump(common) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("vmallocinfo: {e}");
            1
        }
    }
}

fn dump(common: &Common) -> Result<(), String> {
    let arena = PhysArena::new(64 << 20, PAGE).map_err(|e| e.to_string())?;
    let mem = VmallocMem::new(&arena);
    let tlb = SoftTlb::new(common.cpus as usize, PAGE, common.cost_model());
    let window = OneSpace::<K<'_>>::new(
        VirtAddr::new(VSTART),
        VirtAddr::new(VSTART + (1 << 34)),
        PAGE,
    )
    .map_err(|e| e.to_string())?;
    let cpus = HostedCpus::new(common.cpus as usize);
    let v: Vmalloc<'_, K<'_>> =
        Vmalloc::new(&mem, window, tlb.on(0), cpus, LazyMaxPages).map_err(|e| e.to_string())?;
    let e = |e: vmap_lazy::VmallocError| e.to_string();
    let mut live = Vec::new();
    for (i, (pages, caller)) in [
        (1, "alloc_large_system_hash"),
        (4, "module_alloc"),
        (16, "bpf_prog_alloc"),
        (2, "kvmalloc_node"),
        (8, "vmalloc_loop"),
    ]
    .into_iter()
    .enumerate()
    {
        let a = v.vmalloc_caller(pages * PAGE, PAGE, caller).map_err(e)?;
        if i % 2 == 1 {
            v.vfree(a).map_err(e)?; // stays lazy
        } else {
            live.push(a);
        }
    }
    let frames: Vec<_> = (0..3)
        .map(|_| arena.alloc(PAGE, PAGE))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let flags = MapFlags::WRITE | MapFlags::GLOBAL;
    let vm = v.vmap(&frames, flags).map_err(e)?;
    let ram = v.vm_map_ram(&frames[..1], flags).map_err(e)?;
    let early = v
        .vmalloc_with(2 * PAGE, PAGE, VmFlags::NO_GUARD, "early_ioremap")
        .map_err(e)?;
    let stack = v.vmalloc_stack(4 * PAGE).map_err(e)?;
    let huge = v.vmalloc_huge((2 << 20) + 2 * PAGE).map_err(e)?;
    live.extend([early, stack, huge]);
    let areas = v.areas();
    let s = v.stats();
    let counters = json!({
        "purges": s.purges,
        "flush_events": s.flush_events,
        "pages_flushed": s.pages_flushed,
        "ipis": s.ipis,
        "lazy_pages": s.lazy_pages,
        "nodes_visited": s.nodes_visited,
        "nodes_visited_max": s.nodes_visited_max,
        "allocs": s.allocs,
        "frees": s.frees,
        "huge_leaves": s.huge_leaves,
        "huge_fallbacks": s.huge_fallbacks,
        "pagetable_bytes_saved": s.pagetable_bytes_saved,
    });
    if common.json {
        let arr: Vec<_> = areas
            .iter()
            .map(|a| {
                let (s, e) = a.reserved();
                let ((ls, ln), (ps, pn)) = a.leaves();
                let leaves: Vec<_> = [(ls, ln), (ps, pn)]
                    .into_iter()
                    .filter(|&(_, n)| n > 0)
                    .map(|(size, count)| json!({"size": size, "count": count}))
                    .collect();
                json!({
                    "start": s.as_u64(),
                    "end": e.as_u64(),
                    "size": e.as_u64() - s.as_u64(),
                    "mapped_start": a.start.as_u64(),
                    "mapped_end": a.end.as_u64(),
                    "pages": a.pages,
                    "caller": a.caller,
                    "kind": a.kind.name(),
                    "guard": InfoLine(a).guard(),
                    "huge": a.flags.contains(VmFlags::HUGE),
                    "leaves": leaves,
                    "state": match a.state {
                        vmap_lazy::AreaState::Live => a.kind.name(),
                        vmap_lazy::AreaState::Lazy => "lazy",
                    },
                })
            })
            .collect();
        println!("{}", json!({"areas": arr, "counters": counters}));
    } else {
        for a in &areas {
            println!("{}", InfoLine(a));
        }
        println!(
            "# purges={} flush_events={} pages_flushed={} ipis={} lazy_pages={} nodes_visited={} huge_leaves={} pagetable_bytes_saved={}",
            s.purges,
            s.flush_events,
            s.pages_flushed,
            s.ipis,
            s.lazy_pages,
            s.nodes_visited,
            s.huge_leaves,
            s.pagetable_bytes_saved
        );
    }
    // Tear down: nothing may be left behind.
    v.vunmap(vm).map_err(e)?;
    v.vm_unmap_ram(ram, 1).map_err(e)?;
    v.vm_unmap_aliases();
    for a in live {
        v.vfree(a).map_err(e)?;
    }
    v.purge_vmap_area_lazy();
    for f in frames {
        arena.free(f, PAGE).map_err(|e| e.to_string())?;
    }
    if mem.bytes_out() != v.pagetable_bytes() {
        return Err("frames leaked".into());
    }
    Ok(())
}
