//! `harness unmap-dense`: unmap a range of present base pages, with the zap
//! walker or a peer crate, over the same host arena memory and the same
//! software TLB model.
//!
//! * `zap`: `zap_range` under the `work` budget; the gather chains batch
//!   pages (`Gather::with_chain`) and, with `--across-breaks on` (the
//!   default), stays open across lock breaks (`Gather::across_breaks`: the
//!   range is the zap's own, as a `vunmap`'s is), so it flushes once per
//!   full chain (`TlbFlush::flush_ranges`, a full flush above the 33-page
//!   ceiling); with `off`, once per lock break. `gather_flushes`,
//!   `gather_batches`, `chained_pages` and `gather_across_breaks` in the
//!   JSON say how it went.
//! * `x86_64-crate`: rust-osdev `x86_64` 0.15 (`default-features = false`),
//!   `MappedPageTable` over the walker-built tables (same x86 entry format),
//!   per-page `unmap`. A hosted process cannot execute `invlpg`, so each
//!   `MapperFlush` is `.ignore()`d and the same SoftTlb is charged one page
//!   flush per page instead: what the crate's per-page loop pays.
//! * `aarch64-paging`: Google's crate 0.10 (4 KiB granule). It has no unmap
//!   that frees tables or returns frames; the closest it expresses is
//!   `modify_range` clearing `VALID` on every page entry (collecting the
//!   output addresses to free), then one range flush charged to the SoftTlb
//!   by the caller, as its docs leave TLB maintenance to the caller.

use crate::arch::{Arch, with_layout};
use crate::cli::Common;
use crate::munmap::OnOff;
use crate::zap_common::{parse_size, range_start};
use arch_api::{FrameSource, PageTableLayout, PhysArena, PhysMap, SoftTlb, TlbFlush, VirtAddr};
use clap::{Args, ValueEnum};
use serde_json::json;
use std::time::Instant;
use zap_walker::{Frames, Gather, MAX_CHAIN_PAGES, MapFlags, Walker, WorkBudget};

/// `--walker`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WalkerKind {
    /// This workspace's zap walker.
    Zap,
    /// rust-osdev `x86_64`, per-page `unmap` + flush (x86_64 layout only).
    #[value(name = "x86_64-crate")]
    X86_64Crate,
    /// Google `aarch64-paging` (aarch64-4k layout only).
    #[value(name = "aarch64-paging")]
    Aarch64Paging,
}

/// Flags of `unmap-dense`.
#[derive(Args, Clone, Debug)]
pub struct UnmapDenseArgs {
    /// Page-table layout (x86_64-crate needs x86_64, aarch64-paging aarch64-4k).
    #[arg(long, value_enum, default_value = "x86_64")]
    pub arch: Arch,
    /// Bytes of present base pages to unmap (suffixes K M G T).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub size: u64,
    /// Which implementation unmaps.
    #[arg(long, value_enum, default_value = "zap")]
    pub walker: WalkerKind,
    /// The zap walker's ZAP_BLOCK_SIZE: 8 pages (on) or 1024 pages (off).
    #[arg(long, value_enum, default_value = "off")]
    pub preempt: OnOff,
    /// The zap walker's gather stays open across lock breaks
    /// (`Gather::across_breaks`), or ends at each (off).
    #[arg(long, value_enum, default_value = "on")]
    pub across_breaks: OnOff,
}

struct Outcome {
    pages: u64,
    wall_ns: u64,
    tlb_cost_ns: u64,
    flush_events: u64,
    lock_breaks: u64,
    /// The zap walker's gather (zero for the peers).
    gather: zap_walker::GatherStats,
}

fn setup<L: PageTableLayout>(size: u64) -> Result<(u64, u64, PhysArena), String> {
    let ps = L::PAGE_SIZE;
    let pages = size.div_ceil(ps);
    let start = range_start::<L>(pages * ps).ok_or("--size does not fit this layout")?;
    let arena = PhysArena::new(pages * ps + (pages * ps / 256) + (64 << 20), 4096)
        .map_err(|e| e.to_string())?;
    Ok((start, pages, arena))
}

fn map_all<L: PageTableLayout>(
    w: &mut Walker<'_, L, PhysArena>,
    arena: &PhysArena,
    start: u64,
    pages: u64,
) -> Result<(), String> {
    let ps = L::PAGE_SIZE;
    let frames = arena.alloc(pages * ps, ps).map_err(|e| e.to_string())?;
    w.map_range(
        VirtAddr::new(start),
        Frames::Contiguous {
            start: frames,
            pages,
        },
        MapFlags::WRITE | MapFlags::GLOBAL,
    )
    .map_err(|e| e.to_string())
}

fn run_zap<L: PageTableLayout>(a: &UnmapDenseArgs, common: &Common) -> Result<Outcome, String> {
    let ps = L::PAGE_SIZE;
    let (start, pages, arena) = setup::<L>(a.size)?;
    let tlb = SoftTlb::new(common.cpus as usize, ps, common.cost_model());
    let mut w = Walker::<L, _>::new(&arena).map_err(|e| e.to_string())?;
    map_all(&mut w, &arena, start, pages)?;
    let mut g: Gather<_> = Gather::new(tlb.on(0)).with_chain(MAX_CHAIN_PAGES);
    if a.across_breaks == OnOff::On {
        g = g.across_breaks();
    }
    let mut b = WorkBudget::for_page_size(ps, a.preempt == OnOff::On).with_hook(
        |i: &zap_walker::BreakInfo| {
            std::hint::black_box(i);
        },
    );
    let t0 = Instant::now();
    let r = w
        .zap_range(
            VirtAddr::new(start),
            VirtAddr::new(start + pages * ps),
            &mut b,
            &mut g,
        )
        .map_err(|e| e.to_string())?;
    let wall_ns = t0.elapsed().as_nanos() as u64;
    // Every leaf frame is back: what the arena still holds is the root(s).
    if w.tables_below_root() != 0 || arena.frames_in_use() * 4096 != w.pagetable_bytes() {
        return Err("zap left tables or frames behind".into());
    }
    Ok(Outcome {
        pages,
        wall_ns,
        tlb_cost_ns: tlb.stats().cost_ns,
        flush_events: tlb.stats().flush_events,
        lock_breaks: r.lock_breaks,
        gather: g.stats(),
    })
}

/// The x86_64 crate's view of arena memory.
struct ArenaFrames<'a>(&'a PhysArena);

// SAFETY: every table frame the crate asks about is a frame of the arena,
// which `phys_to_ptr` maps to its host memory (the arena outlives the mapper).
unsafe impl x86_64::structures::paging::mapper::PageTableFrameMapping for ArenaFrames<'_> {
    fn frame_to_pointer(
        &self,
        frame: x86_64::structures::paging::PhysFrame,
    ) -> *mut x86_64::structures::paging::PageTable {
        self.0
            .phys_to_ptr(arch_api::PhysAddr::new(frame.start_address().as_u64())) as *mut _
    }
}

fn run_x86_crate(a: &UnmapDenseArgs, common: &Common) -> Result<Outcome, String> {
    use x86_64::structures::paging::{MappedPageTable, Mapper, Page, PageTable, Size4KiB};
    type L = arch_x86_64::X86_64Pml4;
    let ps = L::PAGE_SIZE;
    let (start, pages, arena) = setup::<L>(a.size)?;
    let tlb = SoftTlb::new(common.cpus as usize, ps, common.cost_model());
    let mut w = Walker::<L, _>::new(&arena).map_err(|e| e.to_string())?;
    map_all(&mut w, &arena, start, pages)?;
    let root = arena.phys_to_ptr(w.root(VirtAddr::new(start))) as *mut PageTable;
    // SAFETY: `root` is the walker's PML4 in arena memory, 4 KiB aligned, in
    // the x86 format; the walker is not used while this reference lives.
    let l4 = unsafe { &mut *root };
    // SAFETY: every table reachable from `l4` is arena memory (see ArenaFrames).
    let mut mapper = unsafe { MappedPageTable::new(l4, ArenaFrames(&arena)) };
    let flusher = tlb.on(0);
    let t0 = Instant::now();
    for i in 0..pages {
        let va = start + i * ps;
        let page: Page<Size4KiB> = Page::containing_address(x86_64::VirtAddr::new(va));
        let (frame, flush) = mapper.unmap(page).map_err(|e| format!("{e:?}"))?;
        // No invlpg in a hosted process: charge the model one page flush.
        flush.ignore();
        flusher.flush_page(VirtAddr::new(va));
        arena
            .free(arch_api::PhysAddr::new(frame.start_address().as_u64()), ps)
            .map_err(|e| e.to_string())?;
    }
    let wall_ns = t0.elapsed().as_nanos() as u64;
    drop(w); // frees the (now leafless) tables
    Ok(Outcome {
        pages,
        wall_ns,
        tlb_cost_ns: tlb.stats().cost_ns,
        flush_events: tlb.stats().flush_events,
        lock_breaks: 0,
        gather: Default::default(),
    })
}

/// `aarch64-paging`'s view of arena memory.
struct ArenaTranslation<'a>(&'a PhysArena);

impl aarch64_paging::paging::Translation for ArenaTranslation<'_> {
    fn allocate_table(
        &mut self,
    ) -> (
        std::ptr::NonNull<aarch64_paging::paging::PageTable>,
        aarch64_paging::paging::PhysicalAddress,
    ) {
        let pa = self
            .0
            .alloc(4096, 4096)
            .expect("arena sized for the tables");
        let p = self.0.phys_to_ptr(pa);
        // SAFETY: a fresh 4 KiB arena frame; the crate expects it zeroed.
        unsafe { p.write_bytes(0, 4096) };
        (
            std::ptr::NonNull::new(p as *mut _).expect("arena pointers are not null"),
            aarch64_paging::paging::PhysicalAddress(pa.as_u64() as usize),
        )
    }
    unsafe fn deallocate_table(&mut self, t: std::ptr::NonNull<aarch64_paging::paging::PageTable>) {
        let off = t.as_ptr() as usize - self.0.phys_to_ptr(PhysArena::BASE) as usize;
        let _ = self.0.free(
            arch_api::PhysAddr::new(PhysArena::BASE.as_u64() + off as u64),
            4096,
        );
    }
    fn physical_to_virtual(
        &self,
        pa: aarch64_paging::paging::PhysicalAddress,
    ) -> std::ptr::NonNull<aarch64_paging::paging::PageTable> {
        std::ptr::NonNull::new(self.0.phys_to_ptr(arch_api::PhysAddr::new(pa.0 as u64)) as *mut _)
            .expect("arena pointers are not null")
    }
}

fn run_aarch64_paging(a: &UnmapDenseArgs, common: &Common) -> Result<Outcome, String> {
    use aarch64_paging::Mapping;
    use aarch64_paging::paging::{
        Attributes, Constraints, MemoryRegion, PhysicalAddress, TranslationRegime, VaRange,
    };
    use std::cell::RefCell;
    let ps = 4096u64;
    let pages = a.size.div_ceil(ps);
    let start = 1u64 << 30;
    let arena = PhysArena::new(pages * ps + pages * ps / 256 + (64 << 20), 4096)
        .map_err(|e| e.to_string())?;
    let tlb = SoftTlb::new(common.cpus as usize, ps, common.cost_model());
    let mut m = Mapping::new(
        ArenaTranslation(&arena),
        1,
        0,
        TranslationRegime::El1And0,
        VaRange::Lower,
    );
    let frames = arena.alloc(pages * ps, ps).map_err(|e| e.to_string())?;
    let region = MemoryRegion::new(start as usize, (start + pages * ps) as usize);
    m.map_range(
        &region,
        PhysicalAddress(frames.as_u64() as usize),
        Attributes::VALID | Attributes::ACCESSED,
        Constraints::NO_BLOCK_MAPPINGS,
    )
    .map_err(|e| format!("{e:?}"))?;
    let freed = RefCell::new(Vec::with_capacity(pages as usize));
    let t0 = Instant::now();
    m.modify_range(&region, &|_, d, _| {
        if d.is_valid() {
            freed.borrow_mut().push(d.output_address().0 as u64);
            d.modify_flags(Attributes::empty(), Attributes::VALID);
        }
        Ok(())
    })
    .map_err(|e| format!("{e:?}"))?;
    tlb.on(0)
        .flush_range(VirtAddr::new(start), VirtAddr::new(start + pages * ps), ps);
    for &f in freed.borrow().iter() {
        arena
            .free(arch_api::PhysAddr::new(f), ps)
            .map_err(|e| e.to_string())?;
    }
    let wall_ns = t0.elapsed().as_nanos() as u64;
    if freed.borrow().len() as u64 != pages {
        return Err("aarch64-paging did not visit every page".into());
    }
    Ok(Outcome {
        pages,
        wall_ns,
        tlb_cost_ns: tlb.stats().cost_ns,
        flush_events: tlb.stats().flush_events,
        lock_breaks: 0,
        gather: Default::default(),
    })
}

/// Runs the workload; returns the exit status.
pub fn run(common: &Common, a: &UnmapDenseArgs) -> i32 {
    let r = match (a.walker, a.arch) {
        (WalkerKind::Zap, arch) => with_layout!(arch, L => run_zap::<L>(a, common)),
        (WalkerKind::X86_64Crate, Arch::X86_64) => run_x86_crate(a, common),
        (WalkerKind::Aarch64Paging, Arch::Aarch64_4k) => run_aarch64_paging(a, common),
        (WalkerKind::X86_64Crate, _) => Err("--walker x86_64-crate needs --arch x86_64".into()),
        (WalkerKind::Aarch64Paging, _) => {
            Err("--walker aarch64-paging needs --arch aarch64-4k".into())
        }
    };
    let out = match r {
        Ok(o) => o,
        Err(e) => {
            eprintln!("unmap-dense: {e}");
            return 2;
        }
    };
    let walker = match a.walker {
        WalkerKind::Zap => "zap",
        WalkerKind::X86_64Crate => "x86_64-crate",
        WalkerKind::Aarch64Paging => "aarch64-paging",
    };
    let ns_per_page = out.wall_ns as f64 / out.pages.max(1) as f64;
    if common.json {
        println!(
            "{}",
            json!({
                "walker": walker,
                "arch": with_layout!(a.arch, L => L::NAME),
                "pages": out.pages,
                "wall_ns": out.wall_ns,
                "ns_per_page": ns_per_page,
                "tlb_flush_events": out.flush_events,
                "tlb_cost_ns": out.tlb_cost_ns,
                "lock_breaks": out.lock_breaks,
                "gather_flushes": out.gather.flushes,
                "gather_batches": out.gather.batches,
                "chained_pages": out.gather.chained_pages,
                "gather_across_breaks": a.walker == WalkerKind::Zap && a.across_breaks == OnOff::On,
            })
        );
    } else {
        println!(
            "unmap-dense walker={walker} pages={} wall={} ns ({ns_per_page:.1} ns/page), {} flush events, modelled TLB cost {} ns",
            out.pages, out.wall_ns, out.flush_events, out.tlb_cost_ns
        );
    }
    0
}
