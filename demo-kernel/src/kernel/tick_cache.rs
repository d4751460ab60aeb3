//! The tick on slab-smp's own cache: while slab-smp runs a front, every
//! CPU's tick also frees the objects its previous tick took from that
//! cache (checking their pattern) and allocates new ones, so the
//! interrupted code and the interrupt work the same cache — its sheaves
//! or its tid freelist — on the same CPU, as the issue asks. The sheaves'
//! per-CPU state is plain memory guarded only by `pin` (interrupts
//! masked): a `pin` that did not mask (`no-pin`) lets the tick pop or push
//! in the middle of the interrupted pop or push, and an object ends up
//! owned twice or lost (a stamp or pattern overwritten, or the cache's
//! destroy finding a live object).

use super::stale_check::MAX;
use crate::platform::DemoKernel;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering::SeqCst};
use slub_core::KmemCache;

/// Objects a CPU's tick keeps from this cache until its next tick.
const BATCH: usize = 8;

/// The cache slab-smp runs now, or null.
static CACHE: AtomicPtr<KmemCache<DemoKernel>> = AtomicPtr::new(core::ptr::null_mut());
/// Ticks inside [`run`] with the cache loaded: [`detach`] waits for 0.
static USERS: AtomicU64 = AtomicU64::new(0);
/// Per CPU, the objects its last tick took (touched by that CPU's tick
/// only while the cache is attached, by [`detach`] after).
static STASH: [[AtomicPtr<u8>; BATCH]; MAX] =
    [const { [const { AtomicPtr::new(core::ptr::null_mut()) }; BATCH] }; MAX];
/// Per CPU, allocations its ticks made on the attached cache.
static ALLOCS: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];

/// The byte a tick on `cpu` fills its objects with.
fn tag(cpu: usize) -> u8 {
    0xc0 | cpu as u8
}

/// Lets the ticks use `cache` until [`detach`].
pub fn attach(cache: &KmemCache<DemoKernel>) {
    for a in &ALLOCS {
        a.store(0, SeqCst);
    }
    CACHE.store(core::ptr::from_ref(cache).cast_mut(), SeqCst);
}

/// Stops the ticks using the cache, waits for a tick still in it, frees
/// what the ticks kept; returns (tick allocations on it, all CPUs; their
/// objects found overwritten, or refused by `free`, when freed here).
pub fn detach(cache: &KmemCache<DemoKernel>, cpus: usize) -> (u64, u64) {
    CACHE.store(core::ptr::null_mut(), SeqCst);
    while USERS.load(SeqCst) != 0 {
        core::hint::spin_loop();
    }
    let mut bad = 0;
    for (cpu, stash) in STASH.iter().enumerate().take(cpus) {
        for slot in stash {
            bad += release(cache, slot.swap(core::ptr::null_mut(), SeqCst), cpu);
        }
    }
    (ALLOCS[..cpus].iter().map(|a| a.load(SeqCst)).sum(), bad)
}

/// Ticks each CPU's churn must see allocate on the cache.
const TICKS: u64 = 64;

/// Allocates, stamps, checks and frees objects of `cache` on `cpu`
/// (interrupts open) until [`TICKS`] of this CPU's ticks have allocated on
/// it, or `TICKS + 3` ticks went by: the interrupted code is inside the
/// cache's alloc and free much of the time, so without a working `pin`
/// the ticks land in them (a port without ticks returns at once). Returns the objects found with
/// another owner's bytes (0 unless `pin` is broken).
pub fn churn_until_ticks(cpu: usize, cache: &KmemCache<DemoKernel>) -> u64 {
    let ticks = |c| crate::arch::tick_counts(c).map(|t| t.0);
    let Some(t0) = ticks(cpu) else { return 0 };
    let size = cache.object_size();
    let mine = 0x40 | cpu as u8;
    let mut bad = 0;
    while cpu < MAX
        && ALLOCS[cpu].load(SeqCst) < TICKS * BATCH as u64
        && ticks(cpu).is_some_and(|t| t < t0 + TICKS + 3)
    {
        let Ok(p) = cache.alloc() else {
            bad += 1;
            continue;
        };
        // SAFETY: a fresh object of `size` bytes, this CPU's until the
        // free below.
        unsafe {
            p.as_ptr().write_bytes(mine, size);
            core::hint::spin_loop();
            if core::slice::from_raw_parts(p.as_ptr(), size)
                .iter()
                .any(|&b| b != mine)
            {
                bad += 1;
            }
            bad += u64::from(cache.free(p).is_err());
        }
        // A stretch with interrupts open: with `pin` masking them inside
        // alloc and free, a tick is taken only between calls, and a loop
        // of nothing but calls would hold it off for long.
        for _ in 0..64 {
            core::hint::spin_loop();
        }
    }
    bad
}

/// Checks and frees an object a tick on `cpu` kept (null: nothing);
/// returns 1 if it was overwritten or `free` refused it.
fn release(cache: &KmemCache<DemoKernel>, p: *mut u8, cpu: usize) -> u64 {
    let Some(p) = NonNull::new(p) else { return 0 };
    let size = cache.object_size();
    // SAFETY: a tick on `cpu` took this object from `cache` and filled
    // `size` bytes of it with its tag; only this function frees it, once.
    unsafe {
        let bad = core::slice::from_raw_parts(p.as_ptr(), size)
            .iter()
            .any(|&b| b != tag(cpu));
        u64::from(bad || cache.free(p).is_err())
    }
}

/// One tick on CPU `cpu` (interrupts masked): (allocations, objects of its
/// previous tick found overwritten or refused) on the attached cache.
pub fn run(cpu: usize) -> (u64, u64) {
    USERS.fetch_add(1, SeqCst);
    let cache = CACHE.load(SeqCst);
    let mut out = (0, 0);
    if !cache.is_null() && cpu < MAX {
        // SAFETY: `detach` nulls the pointer and waits for `USERS` to
        // drop to 0 before the cache is destroyed; this tick loaded it
        // while counted in `USERS`.
        let cache = unsafe { &*cache };
        for slot in &STASH[cpu] {
            out.1 += release(cache, slot.swap(core::ptr::null_mut(), SeqCst), cpu);
            if let Ok(p) = cache.alloc() {
                // SAFETY: a fresh object of the cache's size, kept until
                // this CPU's next tick or `detach`.
                unsafe { p.as_ptr().write_bytes(tag(cpu), cache.object_size()) };
                slot.store(p.as_ptr(), SeqCst);
                out.0 += 1;
            }
        }
        ALLOCS[cpu].fetch_add(out.0, SeqCst);
    }
    USERS.fetch_sub(1, SeqCst);
    out
}
