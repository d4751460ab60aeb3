//! `harness vmap-bench`: vmap-core's default policy against the Rust peers a
//! user would otherwise pick, on the test_vmalloc allocation patterns
//! (lib/test_vmalloc.c). One op = one allocation and its free; every
//! allocator runs the same pre-generated request sequence, five times, and
//! the median ns/op is reported.
//!
//! `--pattern aged` is a space after an hour of use rather than an empty
//! one (`aged.rs`): `--live N` areas of 1-16 pages, then each step
//! allocates one and frees a random live one; it reports ns per step and
//! the address-space high-water mark (fragmentation).
//!
//! Besides the default policy (`vmap-core`: `Blocks`, one B+tree of busy
//! areas whose gaps are the free blocks), the rows `vmap-core-augmented`
//! (the two-tree default before it, Linux's since 5.2), `vmap-core-btree`
//! (each free-area policy by name) and `vmap-core-sharded` (the per-node
//! front with its size-class pools, one node: the path a vmalloc user
//! takes) are measured, and `vmap-core-blocktree`: `Blocks`' tree on its
//! own, without the `VmapSpace` around it (no area nodes, no stats).
//!
//! The `vmem` peer (Bonwick arena) needs nightly: it is built only with the
//! harness feature `nightly-peers`
//! (`cargo +nightly build --release -p harness --features nightly-peers`);
//! without it `--allocator vmem` reports a null row and `all` leaves it out.

use crate::cli::Common;
use arch_api::sync::{DefaultRawMutex, Mutex};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use std::time::Instant;
use vmap_core::{
    Augmented, FreeAreaSearch, ShardedVmap, VecSource, VirtAddr, VmapArea, VmapNodes, VmapSpace,
};

mod aged;

const PAGE: u64 = 4096;
/// Linux x86_64's vmalloc space starts here; 32 TiB of it.
const VSTART: u64 = 0xffff_c900_0000_0000;
const VSIZE: u64 = 32 << 40;
const REPEAT: usize = 5;

/// The test_vmalloc patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// 1 page, alloc then free (fix_size_alloc_test).
    #[value(name = "fix_size")]
    FixSize,
    /// 1..=100 pages (random_size_alloc_test).
    #[value(name = "random_size")]
    RandomSize,
    /// 5 pages aligned to 32 KiB (fix_align_alloc_test: THREAD_ALIGN << 1).
    #[value(name = "fix_align")]
    FixAlign,
    /// 1..=10 pages aligned to 1..=1024 pages (random_size_align_alloc_test).
    #[value(name = "random_size_align")]
    RandomSizeAlign,
    /// 1 page with `--busy` one-page areas allocated (long_busy_list_alloc_test).
    #[value(name = "long_busy_list")]
    LongBusyList,
    /// An aged space: `--live` areas of 1-16 pages; each op allocates one
    /// and frees a random live one (`--ops` steps, default 20 000).
    #[value(name = "aged")]
    Aged,
    /// Every test_vmalloc pattern above (`aged` runs on its own).
    All,
}

/// The allocators compared.
#[allow(clippy::enum_variant_names)] // the crates' own names
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Allocator {
    /// This workspace, default policy.
    #[value(name = "vmap-core")]
    VmapCore,
    /// vmap-core with the augmented free tree.
    #[value(name = "vmap-core-augmented")]
    VmapCoreAugmented,
    /// vmap-core with the B-tree free-area index.
    #[value(name = "vmap-core-btree")]
    VmapCoreBtree,
    /// vmap-core's sharded front (one node, size-class pools of depth 64).
    #[value(name = "vmap-core-sharded")]
    VmapCoreSharded,
    /// `Blocks`' tree on its own (`vmap_core::block_tree::BlockTree`): busy
    /// areas in one B+tree, the free blocks the gaps between them, without
    /// the `VmapSpace` around it.
    #[value(name = "vmap-core-blocktree")]
    VmapCoreBlockTree,
    /// rust-vmm's vm-allocator (interval tree, first match).
    #[value(name = "vm-allocator")]
    VmAllocator,
    /// gfx-rs range-alloc (sorted free-range list, best fit).
    #[value(name = "range-alloc")]
    RangeAlloc,
    /// range-alloc behind the lock vmap-core's fronts take (arch-api's
    /// default spinlock, one lock and unlock per operation): what a
    /// concurrent caller of range-alloc pays, to set beside
    /// `vmap-core-sharded`, which locks its node on every operation.
    #[value(name = "range-alloc-locked")]
    RangeAllocLocked,
    /// offset-allocator (TLSF-like, O(1), no alignment).
    #[value(name = "offset-allocator")]
    OffsetAllocator,
    /// vmem (Bonwick arena: power-of-two free lists, instant fit; `xalloc`
    /// for alignment). Needs the `nightly-peers` feature (nightly toolchain).
    #[value(name = "vmem")]
    Vmem,
    /// Every allocator.
    All,
}

/// `vmap-bench` flags.
#[derive(Args, Debug, Clone)]
pub struct VmapBenchArgs {
    /// Allocation pattern.
    #[arg(long, value_enum, default_value = "all")]
    pub pattern: Pattern,
    /// Allocator.
    #[arg(long, value_enum, default_value = "all")]
    pub allocator: Allocator,
    /// Alloc/free pairs per run [default: 200 000; aged: 20 000 steps].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub ops: Option<u64>,
    /// Busy one-page areas for long_busy_list.
    #[arg(long, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub busy: u64,
    /// Live areas of the aged pattern.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub live: u64,
}

const PATTERNS: [Pattern; 5] = [
    Pattern::FixSize,
    Pattern::RandomSize,
    Pattern::FixAlign,
    Pattern::RandomSizeAlign,
    Pattern::LongBusyList,
];
const ALLOCATORS: &[Allocator] = &[
    Allocator::VmapCore,
    Allocator::VmapCoreAugmented,
    Allocator::VmapCoreBtree,
    Allocator::VmapCoreSharded,
    Allocator::VmapCoreBlockTree,
    Allocator::VmAllocator,
    Allocator::RangeAlloc,
    Allocator::RangeAllocLocked,
    Allocator::OffsetAllocator,
    #[cfg(feature = "nightly-peers")]
    Allocator::Vmem,
];

fn name<T: ValueEnum>(v: T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

/// SplitMix64.
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

/// (size, align) in bytes for each op.
fn requests(p: Pattern, ops: u64, seed: u64) -> Vec<(u64, u64)> {
    let mut r = Rng(seed);
    (0..ops)
        .map(|_| match p {
            Pattern::FixSize | Pattern::LongBusyList | Pattern::Aged | Pattern::All => (PAGE, PAGE),
            Pattern::RandomSize => ((r.next() % 100 + 1) * PAGE, PAGE),
            Pattern::FixAlign => (5 * PAGE, 32 << 10),
            Pattern::RandomSizeAlign => {
                let x = r.next();
                ((x % 10 + 1) * PAGE, PAGE << ((x >> 8) % 11))
            }
        })
        .collect()
}

/// One allocator under test: alloc returns a handle, free takes it back.
trait Peer {
    type H;
    const ALIGN: bool;
    fn alloc(&mut self, size: u64, align: u64) -> Option<Self::H>;
    fn free(&mut self, h: Self::H);
    /// Where the handle's range starts, in bytes from the allocator's base.
    fn offset(h: &Self::H) -> u64;
}

struct Vmap<F: FreeAreaSearch>(VmapSpace<F, VecSource>);
impl<F: FreeAreaSearch> Peer for Vmap<F> {
    type H = VirtAddr;
    const ALIGN: bool = true;
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<VirtAddr> {
        let (s, e) = (self.0.start(), self.0.end());
        self.0.alloc(size, align, s, e).ok().map(|a| a.va_start)
    }
    #[inline]
    fn free(&mut self, h: VirtAddr) {
        let _ = self.0.find_unlink(h);
    }
    fn offset(h: &VirtAddr) -> u64 {
        h.as_u64() - VSTART
    }
}

fn vmap<F: FreeAreaSearch>() -> Result<Vmap<F>, String> {
    VmapSpace::new(
        VirtAddr::new(VSTART),
        VirtAddr::new(VSTART + VSIZE),
        PAGE,
        VecSource::new(),
    )
    .map(Vmap)
    .map_err(|e| e.to_string())
}

/// The sharded front as vmalloc uses it (pools on), one node: alloc and
/// free through its `VmapNodes` API, with its locks.
struct Sharded(ShardedVmap);
impl Peer for Sharded {
    type H = VmapArea;
    const ALIGN: bool = true;
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<VmapArea> {
        let (s, e) = self.0.range();
        self.0.alloc(0, size, align, s, e).ok()
    }
    #[inline]
    fn free(&mut self, h: VmapArea) {
        let _ = self.0.free_area(&h);
    }
    fn offset(h: &VmapArea) -> u64 {
        h.va_start.as_u64() - VSTART
    }
}

struct Blocks(vmap_core::block_tree::BlockTree);
impl Peer for Blocks {
    type H = u64;
    const ALIGN: bool = true;
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        self.0.alloc(size, align).ok()
    }
    #[inline]
    fn free(&mut self, h: u64) {
        let _ = self.0.free(h);
    }
    fn offset(h: &u64) -> u64 {
        h - VSTART
    }
}

struct VmAlloc(vm_allocator::AddressAllocator);
impl Peer for VmAlloc {
    type H = vm_allocator::RangeInclusive;
    const ALIGN: bool = true;
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<Self::H> {
        self.0
            .allocate(size, align, vm_allocator::AllocPolicy::FirstMatch)
            .ok()
    }
    #[inline]
    fn free(&mut self, h: Self::H) {
        let _ = self.0.free(&h);
    }
    fn offset(h: &Self::H) -> u64 {
        h.start() - VSTART
    }
}

struct RangeA(range_alloc::RangeAllocator<u64>);
impl Peer for RangeA {
    type H = std::ops::Range<u64>;
    const ALIGN: bool = false;
    #[inline]
    fn alloc(&mut self, size: u64, _: u64) -> Option<Self::H> {
        self.0.allocate_range(size).ok()
    }
    #[inline]
    fn free(&mut self, h: Self::H) {
        self.0.free_range(h);
    }
    fn offset(h: &Self::H) -> u64 {
        h.start - VSTART
    }
}

/// range-alloc as a concurrent caller must use it: through `&self`, one
/// lock per operation (the `&mut` of the trait is not used to skip it).
struct RangeLocked(Mutex<DefaultRawMutex, RangeA>);
impl Peer for RangeLocked {
    type H = <RangeA as Peer>::H;
    const ALIGN: bool = RangeA::ALIGN;
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<Self::H> {
        self.0.lock().alloc(size, align)
    }
    #[inline]
    fn free(&mut self, h: Self::H) {
        self.0.lock().free(h);
    }
    fn offset(h: &Self::H) -> u64 {
        RangeA::offset(h)
    }
}

/// Sizes in pages (its offsets are u32).
struct OffsetA(offset_allocator::Allocator<u32>);
impl Peer for OffsetA {
    type H = offset_allocator::Allocation<u32>;
    const ALIGN: bool = false;
    #[inline]
    fn alloc(&mut self, size: u64, _: u64) -> Option<Self::H> {
        self.0.allocate((size / PAGE) as u32)
    }
    #[inline]
    fn free(&mut self, h: Self::H) {
        self.0.free(h);
    }
    fn offset(h: &Self::H) -> u64 {
        u64::from(h.offset) * PAGE
    }
}

/// The `vmem` crate's arena (feature `nightly-peers`).
#[cfg(feature = "nightly-peers")]
mod vmem_peer {
    use super::{PAGE, Peer, VSIZE, VSTART};
    use vmem::{AllocPolicy, Arena, Layout};

    /// No lock: the arena is used from one thread (it holds an `UnsafeCell`,
    /// so it is not `Sync` and cannot be shared), and none of the other
    /// peers takes a lock either.
    #[derive(Default)]
    pub struct NoLock;

    // SAFETY: `Lock` must give exclusive access to the arena's state. The
    // arena is `!Sync` (it holds an `UnsafeCell`), so `&Arena` never reaches
    // another thread, and its operations do not re-enter one another (no
    // source is configured), so only one operation runs at a time.
    unsafe impl vmem::Lock for NoLock {
        type Guard<'a> = ();
        fn lock(&self) -> Self::Guard<'_> {}
    }

    /// Boundary tags come from the system allocator (through vmem's blanket
    /// `Allocator` impl over `core::alloc::Allocator`, the nightly part).
    pub struct Vmem(Arena<'static, 'static, std::alloc::System, NoLock>);

    impl Vmem {
        pub fn new() -> Result<Self, String> {
            let a = Arena::create("vmap-bench", PAGE as usize, None, std::alloc::System)
                .map_err(|e| e.to_string())?;
            a.add_span(VSTART as usize, VSIZE as usize)
                .map_err(|e| e.to_string())?;
            Ok(Self(a))
        }
    }

    impl Peer for Vmem {
        type H = usize;
        const ALIGN: bool = true;
        #[inline]
        fn alloc(&mut self, size: u64, align: u64) -> Option<usize> {
            if align <= PAGE {
                self.0.alloc(size as usize, AllocPolicy::InstantFit).ok()
            } else {
                let l = Layout::from_size_align(size as usize, align as usize)?;
                self.0.xalloc(l, AllocPolicy::InstantFit).ok()
            }
        }
        #[inline]
        fn free(&mut self, h: usize) {
            let _ = self.0.free(h);
        }
        fn offset(h: &usize) -> u64 {
            *h as u64 - VSTART
        }
    }
}

/// Runs the op sequence once; returns the elapsed nanoseconds.
type Runner = Box<dyn FnMut(&[(u64, u64)]) -> Result<u64, String>>;

/// Something to do with a freshly built allocator of any type.
trait Visit {
    type Out;
    fn visit<P: Peer + 'static>(self, p: P) -> Result<Self::Out, String>;
}

/// Builds allocator `a` (with room for `capacity` live areas) and hands it
/// to `v`.
fn build<V: Visit>(a: Allocator, capacity: u64, v: V) -> Result<V::Out, String> {
    match a {
        Allocator::VmapCore => v.visit(vmap::<vmap_core::DefaultPolicy>()?),
        Allocator::VmapCoreAugmented => v.visit(vmap::<Augmented>()?),
        Allocator::VmapCoreBtree => v.visit(vmap::<vmap_core::BTree>()?),
        Allocator::VmapCoreSharded => v.visit(Sharded(
            ShardedVmap::new(
                VirtAddr::new(VSTART),
                VirtAddr::new(VSTART + VSIZE),
                PAGE,
                1,
            )
            .map_err(|e| e.to_string())?,
        )),
        Allocator::VmapCoreBlockTree => v.visit(Blocks(
            vmap_core::block_tree::BlockTree::new(VSTART, VSTART + VSIZE, PAGE)
                .map_err(|e| e.to_string())?,
        )),
        Allocator::VmAllocator => v.visit(VmAlloc(
            vm_allocator::AddressAllocator::new(VSTART, VSIZE).map_err(|e| e.to_string())?,
        )),
        Allocator::RangeAlloc => v.visit(RangeA(range_alloc::RangeAllocator::new(
            VSTART..VSTART + VSIZE,
        ))),
        Allocator::RangeAllocLocked => v.visit(RangeLocked(Mutex::new(RangeA(
            range_alloc::RangeAllocator::new(VSTART..VSTART + VSIZE),
        )))),
        Allocator::OffsetAllocator => {
            v.visit(OffsetA(offset_allocator::Allocator::with_max_allocs(
                (VSIZE / PAGE).min(u32::MAX as u64) as u32,
                (capacity as u32).saturating_add(1024).max(128 * 1024),
            )))
        }
        #[cfg(feature = "nightly-peers")]
        Allocator::Vmem => v.visit(vmem_peer::Vmem::new()?),
        #[cfg(not(feature = "nightly-peers"))]
        Allocator::Vmem => {
            Err("vmem needs nightly: build the harness with --features nightly-peers".into())
        }
        Allocator::All => Err("internal: All is not an allocator".into()),
    }
}

/// The alloc-then-free loop, after `busy` one-page areas.
struct Pairs {
    busy: u64,
}
impl Visit for Pairs {
    type Out = Runner;
    fn visit<P: Peer + 'static>(self, mut p: P) -> Result<Runner, String> {
        // The busy list stays allocated for the whole run.
        let mut keep = Vec::new();
        for _ in 0..self.busy {
            keep.push(p.alloc(PAGE, PAGE).ok_or("busy list does not fit")?);
        }
        Ok(Box::new(move |reqs: &[(u64, u64)]| {
            let _ = &keep;
            let t = Instant::now();
            for &(size, align) in reqs {
                let h = p.alloc(size, align).ok_or("allocation failed")?;
                p.free(h);
            }
            Ok(t.elapsed().as_nanos() as u64)
        }))
    }
}

/// Whether allocator `a` honours an alignment.
struct CanAlign;
impl Visit for CanAlign {
    type Out = bool;
    fn visit<P: Peer + 'static>(self, _: P) -> Result<bool, String> {
        Ok(P::ALIGN)
    }
}

fn can_align(a: Allocator) -> bool {
    // An allocator that is not built (vmem without nightly): `build`
    // reports why when it is run.
    build(a, 0, CanAlign).unwrap_or(true)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Runs the selected patterns and allocators; returns the exit status.
pub fn run(common: &Common, args: &VmapBenchArgs) -> i32 {
    let patterns: Vec<Pattern> = if args.pattern == Pattern::All {
        PATTERNS.to_vec()
    } else {
        vec![args.pattern]
    };
    let allocators: Vec<Allocator> = if args.allocator == Allocator::All {
        ALLOCATORS.to_vec()
    } else {
        vec![args.allocator]
    };
    let mut results: Vec<Value> = Vec::new();
    for &p in &patterns {
        if p == Pattern::Aged {
            let steps = args.ops.unwrap_or(aged::DEFAULT_STEPS);
            let every = args.allocator == Allocator::All;
            results.extend(aged::run(&allocators, args.live, steps, common.seed, every));
            continue;
        }
        let ops = args.ops.unwrap_or(200_000);
        let reqs = requests(p, ops, common.seed);
        let aligned = matches!(p, Pattern::FixAlign | Pattern::RandomSizeAlign);
        let busy = if p == Pattern::LongBusyList {
            args.busy
        } else {
            0
        };
        for &a in &allocators {
            let mut row = json!({"pattern": name(p), "allocator": name(a), "ops": ops});
            if aligned && !can_align(a) {
                row["ns_per_op"] = Value::Null;
                row["note"] = json!("cannot express alignment");
                results.push(row);
                continue;
            }
            let outcome = build(a, busy, Pairs { busy }).and_then(|mut f| {
                let mut runs = Vec::new();
                for _ in 0..REPEAT {
                    runs.push(f(&reqs)?);
                }
                Ok(runs)
            });
            match outcome {
                Ok(runs) => {
                    let per_op: Vec<u64> = runs.iter().map(|t| t / ops).collect();
                    row["ns_per_op"] = json!(median(per_op.clone()));
                    row["runs_ns_per_op"] = json!(per_op);
                    if busy > 0 {
                        row["busy"] = json!(busy);
                    }
                }
                Err(e) => {
                    row["ns_per_op"] = Value::Null;
                    row["note"] = json!(e);
                }
            }
            eprintln!("vmap-bench: {} {} done", name(p), name(a));
            results.push(row);
        }
    }
    if common.json {
        println!("{}", json!({ "results": results }));
    } else {
        println!(
            "{:<18} {:<20} {:>10} {:>12} {:>14}  note",
            "pattern", "allocator", "ops", "ns_per_op", "high_water"
        );
        let show = |v: &Value| v.as_u64().map_or("-".to_string(), |v| v.to_string());
        for r in &results {
            println!(
                "{:<18} {:<20} {:>10} {:>12} {:>14}  {}",
                r["pattern"].as_str().unwrap_or(""),
                r["allocator"].as_str().unwrap_or(""),
                r["ops"],
                show(&r["ns_per_op"]),
                show(&r["high_water_bytes"]),
                r["note"].as_str().unwrap_or("")
            );
        }
    }
    0
}
