//! The soak's page-table component: every thread owns page tables (its own
//! mm) for every layout over one shared frame arena, and maps, translates
//! and zaps random ranges under every `ZapBudget`. After each map the
//! software MMU must translate every new page to its frame; after each zap
//! no page of the range may translate, no CPU may still hold a translation
//! of it, and the walker must have cleared exactly the pages that were
//! mapped there. At the end everything is zapped and no table page may be
//! left below the roots.

use super::{Rng, Tally};
use crate::zap_common::range_start;
use arch_api::{CostModel, FrameSource, PageTableLayout, PhysAddr, PhysArena, SoftTlb, VirtAddr};
use std::collections::BTreeMap;
use zap_walker::{
    AddressBudget, Frames, Gather, MapFlags, Unbounded, WalkStats, Walker, WorkBudget,
};

/// The window each layout maps into, per thread.
const WINDOW: u64 = 2 << 30;

/// The shared frame arena of the page-table component.
pub fn arena() -> Result<PhysArena, String> {
    PhysArena::new(256 << 20, 4096).map_err(|e| e.to_string())
}

trait Target {
    fn step(&mut self, rng: &mut Rng, tally: &mut Tally);
    fn finish(&mut self, tally: &mut Tally);
}

struct LayoutTarget<'a, L: PageTableLayout> {
    w: Walker<'a, L, PhysArena>,
    arena: &'a PhysArena,
    tlb: SoftTlb,
    base: u64,
    mapped: BTreeMap<u64, PhysAddr>,
}

impl<'a, L: PageTableLayout> LayoutTarget<'a, L> {
    fn new(arena: &'a PhysArena) -> Option<Self> {
        Some(Self {
            w: Walker::new(arena).ok()?,
            arena,
            tlb: SoftTlb::new(1, L::PAGE_SIZE, CostModel::FREE),
            base: range_start::<L>(WINDOW)?,
            mapped: BTreeMap::new(),
        })
    }

    fn map(&mut self, rng: &mut Rng, tally: &mut Tally) {
        let ps = L::PAGE_SIZE;
        let count = 1 + rng.below(16);
        let start = self.base + rng.below(WINDOW / ps - count) * ps;
        let end = start + count * ps;
        if self.mapped.range(start..end).next().is_some() {
            return;
        }
        let mut frames = Vec::with_capacity(count as usize);
        for _ in 0..count {
            match self.arena.alloc(ps, ps) {
                Ok(f) => frames.push(f),
                Err(_) => break,
            }
        }
        let done = frames.len() as u64 == count
            && self
                .w
                .map_range(
                    VirtAddr::new(start),
                    Frames::List(&frames),
                    MapFlags::WRITE | MapFlags::GLOBAL,
                )
                .is_ok();
        if !done {
            // A failed map changes nothing: the frames are still ours.
            for f in frames {
                let _ = self.arena.free(f, ps);
            }
            return;
        }
        for (i, f) in frames.into_iter().enumerate() {
            let va = start + i as u64 * ps;
            self.check(va, Some(f), tally);
            self.tlb.touch(0, VirtAddr::new(va));
            self.mapped.insert(va, f);
        }
    }

    fn check(&self, va: u64, want: Option<PhysAddr>, tally: &mut Tally) {
        let got = self.w.translate(VirtAddr::new(va)).map(|t| t.frame);
        if got != want {
            tally.violation(|| {
                format!(
                    "{}: {va:#x} translates to {got:?}, expected {want:?}",
                    L::NAME
                )
            });
        }
    }

    fn zap(&mut self, start: u64, end: u64, rng: &mut Rng, tally: &mut Tally) {
        let ps = L::PAGE_SIZE;
        let preempt = rng.one_in(2);
        let mut g: Gather<_> = Gather::new(self.tlb.on(0));
        let (s, e) = (VirtAddr::new(start), VirtAddr::new(end));
        // The address budget re-descends per block: only on short ranges.
        let r: Result<WalkStats, _> = match rng.below(3) {
            0 if end - start <= 4096 * ps => {
                self.w
                    .zap_range(s, e, &mut AddressBudget::for_page_size(ps, preempt), &mut g)
            }
            1 => self.w.zap_range(s, e, &mut Unbounded::new(ps), &mut g),
            _ => self
                .w
                .zap_range(s, e, &mut WorkBudget::for_page_size(ps, preempt), &mut g),
        };
        let gone: Vec<u64> = self.mapped.range(start..end).map(|(&va, _)| va).collect();
        match r {
            Ok(st) if st.leaves_cleared != gone.len() as u64 => tally.violation(|| {
                format!(
                    "{}: zap of [{start:#x}, {end:#x}) cleared {} leaves, {} were mapped",
                    L::NAME,
                    st.leaves_cleared,
                    gone.len()
                )
            }),
            Ok(_) => {}
            Err(err) => tally.violation(|| format!("{}: zap failed: {err}", L::NAME)),
        }
        for va in gone {
            self.mapped.remove(&va);
            self.check(va, None, tally);
        }
        if let Some((_, page)) = self.tlb.holder(s, e) {
            tally.violation(|| {
                format!(
                    "{}: {:#x} still in the TLB after its zap",
                    L::NAME,
                    page.as_u64()
                )
            });
        }
    }
}

impl<L: PageTableLayout> Target for LayoutTarget<'_, L> {
    fn step(&mut self, rng: &mut Rng, tally: &mut Tally) {
        let ps = L::PAGE_SIZE;
        match rng.below(10) {
            0..=4 => self.map(rng, tally),
            5 => {
                // Spot checks: a mapped page, and a random address.
                if let Some((&va, &f)) = self
                    .mapped
                    .iter()
                    .nth(rng.below(self.mapped.len().max(1) as u64) as usize)
                {
                    self.check(va, Some(f), tally);
                }
                let va = self.base + rng.below(WINDOW / ps) * ps;
                let want = self.mapped.get(&va).copied();
                self.check(va, want, tally);
            }
            6 => self.zap(self.base, self.base + WINDOW, rng, tally),
            _ => {
                let len = (1 + rng.below(64)) * ps;
                let start = self.base + rng.below((WINDOW - len) / ps) * ps;
                self.zap(start, start + len, rng, tally);
            }
        }
    }

    fn finish(&mut self, tally: &mut Tally) {
        let mut rng = Rng::new(0, 0);
        self.zap(self.base, self.base + WINDOW, &mut rng, tally);
        let left = self.w.tables_below_root();
        tally.leaked_tables += left;
        if left != 0 {
            tally.first_problem.get_or_insert_with(|| {
                format!(
                    "{}: {left} table pages left after unmapping everything",
                    L::NAME
                )
            });
        }
    }
}

/// One thread's page tables, one per layout.
pub struct ThreadZap<'a> {
    targets: Vec<Box<dyn Target + 'a>>,
    tally: Tally,
}

impl<'a> ThreadZap<'a> {
    /// Page tables of every layout for thread `t`.
    pub fn new(arena: &'a PhysArena, _t: usize) -> Self {
        let mut targets: Vec<Box<dyn Target + 'a>> = Vec::new();
        let mut tally = Tally::default();
        macro_rules! add {
            ($($l:ty),*) => {$(
                match LayoutTarget::<$l>::new(arena) {
                    Some(t) => targets.push(Box::new(t)),
                    None => tally.violation(|| format!("{}: no page tables", <$l>::NAME)),
                }
            )*};
        }
        add!(
            arch_x86_64::X86_64Pml4,
            arch_x86_64::X86_64La57,
            arch_aarch64::Aarch64Granule4K,
            arch_aarch64::Aarch64Granule16K,
            arch_aarch64::Aarch64Granule64K,
            arch_ia64_sim::Ia64Sim
        );
        Self { targets, tally }
    }

    /// One random operation on a random layout.
    pub fn step(&mut self, rng: &mut Rng) {
        self.tally.ops += 1;
        let i = rng.below(self.targets.len() as u64) as usize;
        if let Some(t) = self.targets.get_mut(i) {
            t.step(rng, &mut self.tally);
        }
    }

    /// Unmaps everything and checks no table page is left; the page tables
    /// are released (roots included) when this returns.
    pub fn finish(mut self) -> Tally {
        for t in &mut self.targets {
            t.finish(&mut self.tally);
        }
        self.targets.clear();
        self.tally
    }
}
