//! The soak's vmalloc component: one `Vmalloc` over the sharded vmap
//! nodes, shared by every thread, with the stale-TLB checker on every
//! allocation. Threads vmalloc, vmap and vm_map_ram, write every page
//! through the software MMU and record the translation in the software TLB
//! of the CPU they run on, hand areas to each other to free, migrate between
//! simulated CPUs and force purges at random points.

use super::{Rng, Tally};
use crate::test_vmalloc::YieldHosted;
use arch_api::VirtAddr;
use arch_api::{CostModel, FrameSource, HostedCpus, MapFlags, PhysAddr, PhysArena, SoftTlb};
use std::sync::Mutex;
use vmap_lazy::{
    AreaKind, LazyMaxPages, Sharded, StaleTlbChecker, VmFlags, Vmalloc, VmallocError, VmallocMem,
};

type K = YieldHosted<'static>;
type V = Vmalloc<'static, K, LazyMaxPages, Sharded<K>>;

const PAGE: u64 = 4096;
const VSTART: u64 = 0xffff_c900_0000_0000;
const VSIZE: u64 = 1 << 40;
/// Areas one thread holds at most.
const MAX_HELD: usize = 256;

/// An area a thread holds, with the frames it owns for vmap / vm_map_ram.
enum Held {
    Vmalloc(VirtAddr),
    Vmap(VirtAddr, Vec<PhysAddr>),
    Ram(VirtAddr, Vec<PhysAddr>),
}

/// One thread's state.
pub struct VmThread {
    t: usize,
    cpu: usize,
    held: Vec<Held>,
    tally: Tally,
}

/// The shared vmalloc and what the threads leave behind.
pub struct VmSoak {
    arena: &'static PhysArena,
    tlb: &'static SoftTlb,
    checker: &'static StaleTlbChecker<'static>,
    v: V,
    cpus: usize,
    inbox: Vec<Mutex<Vec<Held>>>,
    parked: Mutex<(Vec<Held>, Tally)>,
}

/// The shortages the soak provokes on purpose (it lets areas pile up until
/// the arena runs dry): no space, no frame for the area, or no frame for a
/// page table it needs (more likely since guard pages spread the areas over
/// more tables), each after vmalloc's purge and retry; and a NOWAIT
/// request meeting a held lock.
fn benign(e: &VmallocError) -> bool {
    matches!(
        e,
        VmallocError::NoVirtualSpace(_)
            | VmallocError::OutOfFrames(_)
            | VmallocError::Map(zap_walker::WalkError::OutOfTables(_))
            | VmallocError::WouldBlock
    )
}

impl VmSoak {
    /// A 256 MiB frame arena, 1 TiB of vmalloc space in one sharded node
    /// per CPU. The arena, TLB and checker live as long as the process (a
    /// soak runs once per process).
    pub fn setup(cpus: usize) -> Result<Self, String> {
        let arena: &'static PhysArena = Box::leak(Box::new(
            PhysArena::new(256 << 20, PAGE).map_err(|e| e.to_string())?,
        ));
        let mem: &'static VmallocMem<'static, PhysArena> =
            Box::leak(Box::new(VmallocMem::new(arena)));
        let tlb: &'static SoftTlb = Box::leak(Box::new(SoftTlb::new(cpus, PAGE, CostModel::FREE)));
        let checker: &'static StaleTlbChecker<'static> =
            Box::leak(Box::new(StaleTlbChecker::new(tlb)));
        let nodes = Sharded::<K>::new(
            VirtAddr::new(VSTART),
            VirtAddr::new(VSTART + VSIZE),
            PAGE,
            cpus,
        )
        .map_err(|e| e.to_string())?;
        let mut v = Vmalloc::new(mem, nodes, tlb.on(0), HostedCpus::new(cpus), LazyMaxPages)
            .map_err(|e| e.to_string())?;
        v.set_alloc_check(checker);
        Ok(Self {
            arena,
            tlb,
            checker,
            v,
            cpus,
            inbox: (0..cpus).map(|_| Mutex::new(Vec::new())).collect(),
            parked: Mutex::new((Vec::new(), Tally::default())),
        })
    }

    /// Thread `t`'s state; it starts on CPU `t`.
    pub fn thread(&self, t: usize) -> VmThread {
        VmThread {
            t: t % self.cpus,
            cpu: t % self.cpus,
            held: Vec::new(),
            tally: Tally::default(),
        }
    }

    /// Writes every page of `[a, a + pages)` through the page table and
    /// records the translation on `cpu`'s TLB.
    fn touch(&self, th: &mut VmThread, a: VirtAddr, pages: u64) {
        for i in 0..pages {
            let va = VirtAddr::new(a.as_u64() + i * PAGE);
            if let Err(e) = self.v.write_byte(va, i as u8) {
                th.tally
                    .violation(|| format!("vmalloc: write to {:#x} failed: {e}", va.as_u64()));
            }
            self.tlb.touch(th.cpu, va);
        }
    }

    fn frames(&self, th: &mut VmThread, n: u64) -> Option<Vec<PhysAddr>> {
        let mut f = Vec::with_capacity(n as usize);
        for _ in 0..n {
            match self.arena.alloc(PAGE, PAGE) {
                Ok(p) => f.push(p),
                Err(_) => {
                    self.give_back(th, &f);
                    return None;
                }
            }
        }
        Some(f)
    }

    fn give_back(&self, th: &mut VmThread, frames: &[PhysAddr]) {
        for &p in frames {
            if let Err(e) = self.arena.free(p, PAGE) {
                th.tally
                    .violation(|| format!("vmap: freeing own frame {:#x}: {e}", p.as_u64()));
            }
        }
    }

    fn release(&self, th: &mut VmThread, h: Held) {
        let r = match &h {
            Held::Vmalloc(a) => self.v.vfree(*a),
            Held::Vmap(a, _) => self.v.vunmap(*a),
            Held::Ram(a, f) => self.v.vm_unmap_ram(*a, f.len() as u64),
        };
        if let Err(e) = r {
            th.tally.violation(|| format!("vmalloc: free failed: {e}"));
        }
        if let Held::Vmap(_, f) | Held::Ram(_, f) = &h {
            self.give_back(th, f);
        }
    }

    /// No two areas (live, lazy or vmap blocks) may overlap.
    fn check_areas(&self, th: &mut VmThread) {
        let areas = self.v.areas();
        for w in areas.windows(2) {
            // The ranges held, guard pages included.
            if w[1].reserved().0 < w[0].reserved().1 {
                th.tally.violation(|| {
                    format!(
                        "vmalloc: areas overlap: [{:#x}, {:#x}) {:?} and [{:#x}, {:#x}) {:?}",
                        w[0].start.as_u64(),
                        w[0].end.as_u64(),
                        w[0].kind,
                        w[1].start.as_u64(),
                        w[1].end.as_u64(),
                        w[1].kind
                    )
                });
            }
        }
    }

    /// One random operation.
    pub fn step(&self, th: &mut VmThread, rng: &mut Rng) {
        th.tally.ops += 1;
        if rng.one_in(8) {
            let mut mine = self.inbox[th.t].lock().unwrap_or_else(|e| e.into_inner());
            th.held.append(&mut mine);
        }
        if rng.one_in(64) {
            // Migration: the thread continues on another simulated CPU.
            th.cpu = rng.below(self.cpus as u64) as usize;
        }
        // The simulated CPU this step runs on (the thread's slab steps
        // interleave with these, so declare it every step).
        HostedCpus::run_on(th.cpu);
        let flags = MapFlags::WRITE | MapFlags::GLOBAL;
        match rng.below(100) {
            0..=34 if th.held.len() < MAX_HELD => {
                let mut pages = 1 + rng.below(32);
                let align = PAGE << rng.below(5);
                // Some stacks (a guard page below too) and some GFP_NOWAIT
                // requests, which may meet a held lock (WouldBlock); now and
                // then a huge area (one 2 MiB leaf and a base-page tail, or
                // base pages where no contiguous run is left).
                let mut vm = VmFlags::empty();
                if rng.one_in(128) {
                    vm |= VmFlags::HUGE;
                    pages = 512 + rng.below(4);
                }
                if rng.one_in(8) {
                    vm |= VmFlags::GUARD_BEFORE;
                }
                if rng.one_in(4) {
                    vm |= VmFlags::NOWAIT;
                }
                match self.v.vmalloc_with(pages * PAGE, align, vm, "soak") {
                    Ok(a) => {
                        self.touch(th, a, pages);
                        th.held.push(Held::Vmalloc(a));
                    }
                    Err(e) if benign(&e) => {}
                    Err(e) => th.tally.violation(|| format!("vmalloc: {e}")),
                }
            }
            35..=44 if th.held.len() < MAX_HELD => {
                let Some(f) = self.frames(th, 1 + rng.below(8)) else {
                    return;
                };
                match self.v.vmap(&f, flags) {
                    Ok(a) => {
                        self.touch(th, a, f.len() as u64);
                        th.held.push(Held::Vmap(a, f));
                    }
                    Err(e) => {
                        if !benign(&e) {
                            th.tally.violation(|| format!("vmap: {e}"));
                        }
                        self.give_back(th, &f);
                    }
                }
            }
            45..=54 if th.held.len() < MAX_HELD => {
                let Some(f) = self.frames(th, 1 + rng.below(16)) else {
                    return;
                };
                match self.v.vm_map_ram(&f, flags) {
                    Ok(a) => {
                        self.touch(th, a, f.len() as u64);
                        th.held.push(Held::Ram(a, f));
                    }
                    Err(e) => {
                        if !benign(&e) {
                            th.tally.violation(|| format!("vm_map_ram: {e}"));
                        }
                        self.give_back(th, &f);
                    }
                }
            }
            95 => self.check_areas(th),
            96..=97 => {
                self.v.purge_vmap_area_lazy();
            }
            98..=99 => {
                self.v.vm_unmap_aliases();
            }
            _ if !th.held.is_empty() => {
                let h = th
                    .held
                    .swap_remove(rng.below(th.held.len() as u64) as usize);
                if rng.one_in(4) {
                    // Freed by another thread (vm_map_ram areas stay with
                    // the CPU that mapped them, as Linux requires). An inbox
                    // no thread serves (fewer threads than CPUs) is emptied
                    // only by `finish`: its areas pile up until the arena
                    // runs dry, so the soak also runs every OutOfFrames
                    // unwind against concurrent frees. Keep that: it is how
                    // the old vunmap keep-frees leak showed up (a shared
                    // free mode, since replaced by a per-call `Lent` sink).
                    let other = rng.below(self.cpus as u64) as usize;
                    if !matches!(h, Held::Ram(..)) {
                        self.inbox[other]
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(h);
                        return;
                    }
                }
                if let (Held::Vmalloc(a), true) = (&h, rng.one_in(3)) {
                    return self.resize(th, *a, 1 + rng.below(32));
                }
                self.release(th, h);
            }
            _ => {}
        }
    }

    /// vrealloc of a held vmalloc area (shrunk, grown in place or moved):
    /// its first byte (0, from `touch`) must survive.
    fn resize(&self, th: &mut VmThread, a: VirtAddr, pages: u64) {
        match self.v.vrealloc(a, pages * PAGE) {
            Ok(b) => {
                match self.v.read_byte(b) {
                    Ok(0) => {}
                    r => th.tally.violation(|| {
                        format!("vrealloc: contents lost at {:#x}: {r:?}", b.as_u64())
                    }),
                }
                self.touch(th, b, pages);
                th.held.push(Held::Vmalloc(b));
            }
            Err(e) if benign(&e) => th.held.push(Held::Vmalloc(a)),
            Err(e) => {
                th.tally.violation(|| format!("vrealloc: {e}"));
                th.held.push(Held::Vmalloc(a));
            }
        }
    }

    /// Leaves a finished thread's areas and counts for [`finish`](Self::finish).
    pub fn park(&self, th: VmThread) {
        let mut p = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        p.0.extend(th.held);
        p.1.add(&th.tally);
    }

    /// Frees everything left, purges, and accounts for every frame and range.
    pub fn finish(self) -> Tally {
        let (held, mut tally) =
            std::mem::take(&mut *self.parked.lock().unwrap_or_else(|e| e.into_inner()));
        let mut th = VmThread {
            t: 0,
            cpu: 0,
            held: Vec::new(),
            tally: Tally::default(),
        };
        let inboxes = self
            .inbox
            .iter()
            .flat_map(|m| std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner())));
        for h in held.into_iter().chain(inboxes.collect::<Vec<_>>()) {
            self.release(&mut th, h);
        }
        self.v.purge_vmap_area_lazy();
        self.v.vm_unmap_aliases();
        tally.add(&th.tally);
        tally.violations += self.checker.violations();
        if let Some(f) = self.checker.first_violation() {
            tally.first_problem.get_or_insert_with(|| {
                format!(
                    "stale TLB: [{:#x}, {:#x}) handed out while CPU {} held {:#x}",
                    f.start.as_u64(),
                    f.end.as_u64(),
                    f.cpu,
                    f.page.as_u64()
                )
            });
        }
        // Every frame still out is a page-table page of the kernel map.
        let pt = self.v.pagetable_bytes();
        let (arena_out, mem_out) = (self.arena.bytes_in_use(), self.v.mem().bytes_out());
        let leaked = arena_out.max(mem_out).saturating_sub(pt) / PAGE;
        tally.leaked_pages += leaked;
        if leaked != 0 {
            tally.first_problem.get_or_insert_with(|| {
                format!(
                    "vmalloc: {leaked} pages not returned after the final purge \
                     (arena {arena_out} B in use, vmalloc's frame source {mem_out} B out, \
                     page tables {pt} B)"
                )
            });
        }
        // Per-CPU vmap blocks stay reserved (as in Linux); nothing else may.
        let left = self
            .v
            .areas()
            .iter()
            .filter(|a| a.kind != AreaKind::VmapBlock)
            .count() as u64;
        tally.leaked_ranges += left + self.v.vmap_lazy_nr();
        if left != 0 || self.v.vmap_lazy_nr() != 0 {
            tally.first_problem.get_or_insert_with(|| {
                format!(
                    "vmalloc: {left} areas and {} lazy pages left after the final purge",
                    self.v.vmap_lazy_nr()
                )
            });
        }
        tally
    }
}
