//! `harness vmap-bench`: vmap-core's default policy against the Rust peers a
//! user would otherwise pick, on the test_vmalloc allocation patterns
//! (lib/test_vmalloc.c). One op = one allocation and its free; every
//! allocator runs the same pre-generated request sequence, five times, and
//! the median ns/op is reported.
//!
//! The `vmem` peer (Bonwick arena) needs nightly: it is built only with the
//! harness feature `nightly-peers`
//! (`cargo +nightly build --release -p harness --features nightly-peers`);
//! without it `--allocator vmem` reports a null row and `all` leaves it out.

use crate::cli::Common;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use std::time::Instant;
use vmap_core::{Augmented, VecSource, VirtAddr, VmapSpace};

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
    /// Every pattern.
    All,
}

/// The allocators compared.
#[allow(clippy::enum_variant_names)] // the crates' own names
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Allocator {
    /// This workspace, default policy (augmented free tree).
    #[value(name = "vmap-core")]
    VmapCore,
    /// rust-vmm's vm-allocator (interval tree, first match).
    #[value(name = "vm-allocator")]
    VmAllocator,
    /// gfx-rs range-alloc (sorted free-range list, best fit).
    #[value(name = "range-alloc")]
    RangeAlloc,
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
    /// Alloc/free pairs per run.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub ops: u64,
    /// Busy one-page areas for long_busy_list.
    #[arg(long, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub busy: u64,
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
    Allocator::VmAllocator,
    Allocator::RangeAlloc,
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
            Pattern::FixSize | Pattern::LongBusyList | Pattern::All => (PAGE, PAGE),
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
}

struct Vmap(VmapSpace<Augmented, VecSource>);
impl Peer for Vmap {
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
    }
}

/// Runs the op sequence once; returns the elapsed nanoseconds.
type Runner = Box<dyn FnMut(&[(u64, u64)]) -> Result<u64, String>>;

fn make(a: Allocator, busy: u64) -> Result<Runner, String> {
    fn boxed<P: Peer + 'static>(mut p: P, busy: u64) -> Result<Runner, String> {
        // The busy list stays allocated for the whole run.
        let mut keep = Vec::new();
        for _ in 0..busy {
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
    match a {
        Allocator::VmapCore => boxed(
            Vmap(
                VmapSpace::new(
                    VirtAddr::new(VSTART),
                    VirtAddr::new(VSTART + VSIZE),
                    PAGE,
                    VecSource::new(),
                )
                .map_err(|e| e.to_string())?,
            ),
            busy,
        ),
        Allocator::VmAllocator => boxed(
            VmAlloc(vm_allocator::AddressAllocator::new(VSTART, VSIZE).map_err(|e| e.to_string())?),
            busy,
        ),
        Allocator::RangeAlloc => boxed(
            RangeA(range_alloc::RangeAllocator::new(VSTART..VSTART + VSIZE)),
            busy,
        ),
        Allocator::OffsetAllocator => boxed(
            OffsetA(offset_allocator::Allocator::with_max_allocs(
                (VSIZE / PAGE).min(u32::MAX as u64) as u32,
                (busy as u32).saturating_add(1024).max(128 * 1024),
            )),
            busy,
        ),
        #[cfg(feature = "nightly-peers")]
        Allocator::Vmem => boxed(vmem_peer::Vmem::new()?, busy),
        #[cfg(not(feature = "nightly-peers"))]
        Allocator::Vmem => {
            Err("vmem needs nightly: build the harness with --features nightly-peers".into())
        }
        Allocator::All => Err("internal: All is not an allocator".into()),
    }
}

fn can_align(a: Allocator) -> bool {
    match a {
        Allocator::VmapCore => Vmap::ALIGN,
        Allocator::VmAllocator => VmAlloc::ALIGN,
        Allocator::RangeAlloc => RangeA::ALIGN,
        Allocator::OffsetAllocator => OffsetA::ALIGN,
        #[cfg(feature = "nightly-peers")]
        Allocator::Vmem => vmem_peer::Vmem::ALIGN,
        // Not built: `make` reports why.
        #[cfg(not(feature = "nightly-peers"))]
        Allocator::Vmem => true,
        Allocator::All => false,
    }
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
        let reqs = requests(p, args.ops, common.seed);
        let aligned = matches!(p, Pattern::FixAlign | Pattern::RandomSizeAlign);
        let busy = if p == Pattern::LongBusyList {
            args.busy
        } else {
            0
        };
        for &a in &allocators {
            let mut row = json!({"pattern": name(p), "allocator": name(a), "ops": args.ops});
            if aligned && !can_align(a) {
                row["ns_per_op"] = Value::Null;
                row["note"] = json!("cannot express alignment");
                results.push(row);
                continue;
            }
            let outcome = make(a, busy).and_then(|mut f| {
                let mut runs = Vec::new();
                for _ in 0..REPEAT {
                    runs.push(f(&reqs)?);
                }
                Ok(runs)
            });
            match outcome {
                Ok(runs) => {
                    let per_op: Vec<u64> = runs.iter().map(|t| t / args.ops).collect();
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
            "{:<18} {:<17} {:>10} {:>12}  note",
            "pattern", "allocator", "ops", "ns_per_op"
        );
        for r in &results {
            println!(
                "{:<18} {:<17} {:>10} {:>12}  {}",
                r["pattern"].as_str().unwrap_or(""),
                r["allocator"].as_str().unwrap_or(""),
                r["ops"],
                r["ns_per_op"]
                    .as_u64()
                    .map_or("-".to_string(), |v| v.to_string()),
                r["note"].as_str().unwrap_or("")
            );
        }
    }
    0
}
