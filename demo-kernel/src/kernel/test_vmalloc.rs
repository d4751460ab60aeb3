//! `test-vmalloc`: Linux's `lib/test_vmalloc.c` cases (as the harness's
//! `test_vmalloc.rs` defines them) with every online CPU a tester at once,
//! on the sharded front (`Sharded`: a vmap node per CPU) and, beside it,
//! the one-lock front (`OneSpace`), each a `Vmalloc` over its own slice of
//! the window. Per case and CPU: pass/fail and cycles. Loop counts are far
//! below Linux's defaults (emulation; the whole run stays well under a
//! second at `--smp 4`); `pcpu_alloc_test` (no per-CPU allocator here) is
//! left out.

use super::stale_check::MAX;
use super::vmalloc_loop::window_slice;
use super::{check, kprint};
use crate::arch::{self, Layout as ArchLayout};
use crate::frames::Frames;
use crate::platform::DemoKernel;
use alloc::vec::Vec;
use arch_api::{FrameSource, MapFlags, PageTableLayout, VirtAddr};
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};
use vmap_core::VmapNodes;
use vmap_lazy::{LazyMaxPages, NodeLazy, OneSpace, Sharded, Vmalloc, VmallocError, VmallocMem};

/// Iterations per case per CPU (Linux: 1 000 000).
const LOOPS: u64 = 48;
/// Areas `long_busy_list` keeps allocated (Linux: 15 000).
const BUSY: u64 = 500;
const PAGE: u64 = ArchLayout::PAGE_SIZE;

const CASES: [&str; 8] = [
    "fix_size_alloc_test",
    "full_fit_alloc_test",
    "long_busy_list_alloc_test",
    "random_size_alloc_test",
    "fix_align_alloc_test",
    "random_size_align_alloc_test",
    "align_shift_alloc_test",
    "vm_map_ram_test",
];

static MEM: [VmallocMem<'static, Frames>; 2] = [const { VmallocMem::new(&Frames) }; 2];
static VM: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());
/// Per CPU and case: cycles, and 1 if the case failed.
static CYCLES: [[AtomicU64; 8]; MAX] = [const { [const { AtomicU64::new(0) }; 8] }; MAX];
static FAILED: [[AtomicU64; 8]; MAX] = [const { [const { AtomicU64::new(0) }; 8] }; MAX];

type Tv<N> = Vmalloc<'static, DemoKernel, LazyMaxPages, N>;

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn touch(a: VirtAddr) {
    // SAFETY: `a` starts an area just mapped writable in the live tables.
    unsafe { (a.as_u64() as *mut u8).write_volatile(0) };
}

fn alloc_touch_free<N: VmapNodes<Lazy = NodeLazy>>(
    v: &Tv<N>,
    pages: u64,
    align: u64,
) -> Result<(), VmallocError> {
    let a = v.vmalloc_aligned(pages * PAGE, align)?;
    touch(a);
    v.vfree(a)
}

fn run_case<N: VmapNodes<Lazy = NodeLazy>>(
    v: &Tv<N>,
    case: usize,
    rng: &mut Rng,
) -> Result<(), VmallocError> {
    match case {
        0 => (0..LOOPS).try_for_each(|_| alloc_touch_free(v, 3, PAGE)),
        1 => {
            let mut ptr = Vec::new();
            let mut junk = Vec::new();
            for _ in 0..LOOPS {
                ptr.push(v.vmalloc_aligned(PAGE, PAGE)?);
                junk.push(v.vmalloc_aligned(PAGE, PAGE)?);
            }
            for j in junk.drain(..) {
                v.vfree(j)?;
            }
            for p in ptr.iter_mut() {
                v.vfree(*p)?;
                let a = v.vmalloc_aligned(PAGE, PAGE)?;
                touch(a);
                *p = a;
            }
            ptr.into_iter().try_for_each(|p| v.vfree(p))
        }
        2 => {
            let busy: Vec<_> = (0..BUSY)
                .map(|_| v.vmalloc_aligned(PAGE, PAGE))
                .collect::<Result<_, _>>()?;
            let r = (0..LOOPS).try_for_each(|_| alloc_touch_free(v, 1, PAGE));
            busy.into_iter().try_for_each(|b| v.vfree(b))?;
            r
        }
        3 => (0..LOOPS).try_for_each(|_| alloc_touch_free(v, 1 + rng.below(100), PAGE)),
        4 => (0..LOOPS).try_for_each(|_| alloc_touch_free(v, 5, 4 * PAGE)),
        5 => (0..LOOPS).try_for_each(|_| {
            let align = PAGE << rng.below(6);
            alloc_touch_free(v, 1 + rng.below(10), align)
        }),
        6 => {
            for i in 0..64u32 {
                match v.vmalloc_aligned(PAGE, 1u64 << i) {
                    Ok(a) => {
                        touch(a);
                        v.vfree(a)?;
                    }
                    // Alignments beyond the window cannot be met.
                    Err(VmallocError::NoVirtualSpace(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }
        _ => {
            let frame = Frames
                .alloc(PAGE, PAGE)
                .map_err(VmallocError::OutOfFrames)?;
            let flags = MapFlags::WRITE | MapFlags::GLOBAL;
            let r = (0..LOOPS).try_for_each(|_| {
                let a = v.vm_map_ram(&[frame], flags)?;
                touch(a);
                v.vm_unmap_ram(a, 1)
            });
            let _ = Frames.free(frame, PAGE);
            r
        }
    }
}

fn worker<N: VmapNodes<Lazy = NodeLazy>>(cpu: usize) {
    // SAFETY: `run_front` stored a live `Tv<N>` before `run_on_all` and
    // drops it only after every CPU returned.
    let v = unsafe { &*(VM.load(Relaxed) as *const Tv<N>) };
    let mut rng = Rng(0x9e37_79b9 ^ (cpu as u64 + 1) << 1 | 1);
    for case in 0..CASES.len() {
        let t0 = arch::cycles();
        let failed = run_case(v, case, &mut rng).is_err();
        CYCLES[cpu][case].store(arch::cycles() - t0, Relaxed);
        FAILED[cpu][case].store(u64::from(failed), Relaxed);
    }
}

fn run_front<N: VmapNodes<Lazy = NodeLazy>>(name: &str, k: usize, nodes: N) {
    let cpus = arch::online().min(MAX);
    let (start, _) = window_slice(k);
    let root = arch::kernel_root(start);
    // SAFETY: the live kernel table translating the slice, which is this
    // vmalloc's alone (`window_slice`); the table lives for ever.
    let v: Tv<N> = match unsafe {
        Vmalloc::attach(
            &MEM[k - 4],
            root,
            nodes,
            arch::tlb(),
            arch::cpus_online(),
            LazyMaxPages,
        )
    } {
        Ok(v) => v,
        Err(e) => {
            check(false, format_args!("test-vmalloc {name}: setup: {e:?}"));
            return;
        }
    };
    VM.store(&v as *const Tv<N> as *mut (), Relaxed);
    let t0 = arch::cycles();
    arch::run_on_all(worker::<N>);
    let wall = arch::cycles() - t0;
    VM.store(core::ptr::null_mut(), Relaxed);
    v.purge_vmap_area_lazy();
    let leaked = (MEM[k - 4].bytes_out() - v.pagetable_bytes()) / PAGE;
    kprint!(
        "{{\"workload\":\"test-vmalloc\",\"arch\":\"{}\",\"cpus\":{cpus},\"nodes\":\"{name}\",\"loops\":{LOOPS},\"wall_cycles\":{wall},\"leaked_pages\":{leaked},\"tests\":[",
        arch::NAME
    );
    for (i, case) in CASES.iter().enumerate() {
        let pass = (0..cpus).all(|c| FAILED[c][i].load(Relaxed) == 0) && leaked == 0;
        kprint!(
            "{}{{\"name\":\"{case}\",\"pass\":{pass},\"cycles_per_cpu\":[",
            if i == 0 { "" } else { "," }
        );
        for (c, row) in CYCLES.iter().enumerate().take(cpus) {
            kprint!("{}{}", if c == 0 { "" } else { "," }, row[i].load(Relaxed));
        }
        kprint!("]}}");
        check(pass, format_args!("test-vmalloc {name}: {case} failed"));
    }
    kprint!("]}}\n");
}

/// Runs the cases on the sharded front, then on the one-lock front.
pub fn run() {
    let cpus = arch::online().min(MAX);
    let make = |k: usize| {
        let (s, e) = window_slice(k);
        (VirtAddr::new(s), VirtAddr::new(e))
    };
    let (s, e) = make(4);
    match Sharded::<DemoKernel>::new(s, e, PAGE, cpus) {
        Ok(n) => run_front("sharded", 4, n),
        Err(err) => check(false, format_args!("test-vmalloc sharded: {err:?}")),
    }
    let (s, e) = make(5);
    match OneSpace::<DemoKernel>::new(s, e, PAGE) {
        Ok(n) => run_front("global", 5, n),
        Err(err) => check(false, format_args!("test-vmalloc global: {err:?}")),
    }
}
