//! The nolock pair against the ordinary pair on a cache whose backend can
//! pin from any context (`LinuxCpus`: the CPU the thread runs on, a
//! per-CPU try-lock as the guard, `try_pin_nolock` the same try-lock), so
//! that on the sheaves front the nolock calls use the sheaves as the
//! ordinary ones do. The `ThreadCpus` rows of `kmem-bench` cannot show that:
//! its sheaves fast path takes no guard, so nolock calls there stay on the
//! tid front's lockless freelist.

use arch_api::LinuxCpus;
use slub_core::testing::HostedPlatform;
use slub_core::{CacheFlags, KmemCache, SystemPages};
use std::time::Instant;

type PerCpuCache = KmemCache<HostedPlatform<&'static SystemPages, &'static LinuxCpus>>;

/// `alloc_nolock` / `free_nolock` pairs; ns per pair.
// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
fn nolock_pairs_percpu(c: &PerCpuCache, loops: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..loops {
        let p = c.alloc_nolock().unwrap_or_else(|_| std::process::abort());
        // SAFETY: allocated just above, freed once.
        if unsafe { c.free_nolock(std::hint::black_box(p)) }.is_err() {
            std::process::abort();
        }
    }
    t.elapsed().as_nanos() as f64 / loops as f64
}

/// `alloc` / `free` pairs on the same cache; ns per pair.
// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
fn cache_pairs_percpu(c: &PerCpuCache, loops: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..loops {
        let p = c.alloc().unwrap_or_else(|_| std::process::abort());
        // SAFETY: allocated just above, freed once.
        if unsafe { c.free(std::hint::black_box(p)) }.is_err() {
            std::process::abort();
        }
    }
    t.elapsed().as_nanos() as f64 / loops as f64
}

/// Medians of `repeat` runs of (nolock pair, ordinary pair) on a new
/// `LinuxCpus` cache of `size`-byte objects with `flags`, side by side.
pub(super) fn nolock_vs_ordinary(
    flags: CacheFlags,
    size: usize,
    loops: usize,
    repeat: usize,
) -> (f64, f64) {
    // The thread stays on the CPU it runs on (a nolock call on a CPU without
    // a slab or sheaf would be refused: it never refills) and goes back to
    // its full set afterwards.
    let _held = HoldCpu::here();
    let pages: &'static SystemPages = Box::leak(Box::new(SystemPages::new()));
    let cpus: &'static LinuxCpus = Box::leak(Box::new(LinuxCpus::new()));
    let c: PerCpuCache = KmemCache::new("nolock-percpu", size, 8, flags, pages, cpus)
        .unwrap_or_else(|_| std::process::abort());
    // Warm-up: the CPU gets a slab (and, on sheaves, a main sheaf).
    cache_pairs_percpu(&c, 1024);
    nolock_pairs_percpu(&c, 1024);
    let (mut no, mut fa) = (vec![], vec![]);
    for _ in 0..repeat {
        no.push(nolock_pairs_percpu(&c, loops));
        fa.push(cache_pairs_percpu(&c, loops));
    }
    (super::median(no), super::median(fa))
}

/// The calling thread's CPU affinity narrowed to one CPU, until dropped
/// (best effort: on failure the thread may migrate, and the rows that need
/// it abort as before). The remote-free row pins its threads with it too.
pub(super) struct HoldCpu(Option<libc::cpu_set_t>);

impl HoldCpu {
    /// On the CPU the thread runs on now.
    fn here() -> Self {
        // SAFETY: a plain libc call.
        let cpu = unsafe { libc::sched_getcpu() };
        match usize::try_from(cpu) {
            Ok(cpu) => Self::on(cpu),
            Err(_) => Self(None),
        }
    }

    /// On CPU `cpu`.
    pub(super) fn on(cpu: usize) -> Self {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Self(None);
        }
        // SAFETY: plain libc calls on this thread with sets of the right size.
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            let sz = std::mem::size_of::<libc::cpu_set_t>();
            if libc::sched_getaffinity(0, sz, &mut old) != 0 {
                return Self(None);
            }
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            if libc::sched_setaffinity(0, sz, &one) != 0 {
                return Self(None);
            }
            Self(Some(old))
        }
    }

    /// The CPUs the calling thread may run on, in order (empty if unknown).
    pub(super) fn allowed() -> Vec<usize> {
        // SAFETY: a plain libc call with a set of the right size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
                return Vec::new();
            }
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }
}

impl Drop for HoldCpu {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            // SAFETY: as in `here`; `old` came from sched_getaffinity.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&old), &old) };
        }
    }
}
