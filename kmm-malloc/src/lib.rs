//! slub-core's kmalloc as the C allocator of any Linux program:
//!
//! ```text
//! cargo build --release -p kmm-malloc
//! LD_PRELOAD=target/release/libkmm_malloc.so python3 script.py
//! KMM_SLUB_FRONT=sheaves KMM_SLUB_STATS=1 LD_PRELOAD=... sqlite3 db < q.sql
//! ```
//!
//! * `malloc` and friends up to 16 KiB are `Kmalloc`'s twelve caches on
//!   real CPUs ([`arch_api::LinuxCpus`]: the tid front with the SMP DW-CAS,
//!   or the sheaves front behind per-CPU try-locks); 16 KiB to 1 MiB are
//!   page blocks of the region (`region.rs`), above that plain `mmap`s.
//!   A page block freed on a CPU is kept for that CPU's next request of
//!   the same size (`cpu_blocks.rs`, up to 1 MiB per CPU), so threads on
//!   different CPUs do not meet at the region's lock: glibc-thread at 16
//!   threads on 16 CPUs went from 728 ms to 59 ms (BENCHMARKS.md,
//!   session 14).
//! * `KMM_SLUB_FRONT=tid|sheaves` picks the front (default `sheaves`, the
//!   faster here on most workloads: BENCHMARKS.md); `KMM_SLUB_STATS=1` prints each cache's slabinfo
//!   line and counters to stderr at exit (and only then counts the fast
//!   paths' hits, `alloc_fastpath` / `free_fastpath`: a per-CPU store on
//!   every hit that cost glibc-simple 14 % of its time).
//! * The caches keep Linux's tunables (sheaves sized by object size, as
//!   Linux sizes them since 2026, but at least 8 KiB of objects below
//!   1 KiB and 32 KiB from 1 KiB up) except the sheaves front's barn,
//!   which may hold up to 1 MiB of full sheaves per cache (a program that
//!   frees a thousand blocks in a row then exchanges sheaves instead of
//!   flushing them to slabs); `KMM_SLUB_SHEAF` / `KMM_SLUB_BARN` override
//!   the objects per sheaf and the full sheaves per barn.
//! * The slabs' half of the region asks for transparent huge pages
//!   (`MADV_HUGEPAGE`, as mimalloc does for its arenas; the kernel's THP
//!   setting must allow `madvise`): a fresh 2 MiB of slabs costs one page
//!   fault instead of 512, and TLB misses go with it. Blocks above 16 KiB
//!   come from the other half, with 4 KiB pages (a program may touch only
//!   their start). `KMM_THP=0` keeps 4 KiB pages everywhere. On
//!   malloc-bench huge pages took sh6bench from 1.41x to 0.79x of
//!   mimalloc's time (15 of 18 rows within 1.25x instead of 11), with
//!   peak RSS 0.61-1.08x of mimalloc's instead of 0.42-0.84x
//!   (BENCHMARKS.md, session 13).
//! * No thread-locals and no allocation inside: callable before TLS exists
//!   and during thread exit. Calls made while the first call is setting the
//!   caches up (the same thread re-entering, e.g. from `pthread_atfork`) are
//!   served from a static bootstrap arena. `fork` is handled with
//!   `pthread_atfork`: the per-CPU locks, every lock inside the caches
//!   ([`Kmalloc::lock_for_fork`]) and the region's locks (each CPU's
//!   block cache, then the region's own) are taken around it, in that
//!   order, so the child finds them all free.
//! * Never unloaded: linked with `-z nodelete` (`dlclose` leaves it
//!   mapped), which lets arch-api's `rseq-resident` leave each thread's
//!   rseq descriptor armed between sections instead of clearing it on
//!   every `malloc` and `free`.
//! * A free that slub-core refuses (double free detected, foreign or
//!   misaligned pointer, a corrupted freelist) aborts with a message naming
//!   the pointer and the reason.
// The unit tests build the crate without its C exports (a test binary must
// not interpose on its own libc), which leaves the paths behind them unused.
#![cfg_attr(test, allow(dead_code, unused_imports))]

mod boot;
mod cpu_blocks;
mod exports;
mod platform;
mod region;
mod report;

use arch_api::cpu::linux::CpuLock;
use arch_api::{CpuLocal, LinuxCpus, MAX_LINUX_CPUS};
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use crossbeam_utils::CachePadded;
use platform::Preload;
use region::Region;
use slub_core::{CacheConfig, CacheFlags, Kmalloc, NewSlabHook};

const UNINIT: u8 = 0;
const BUSY: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

/// Read by every call: alone on its line(s), so that no write to a
/// neighbour (a cache's lock, a counter) makes every `malloc` miss.
static STATE: CachePadded<AtomicU8> = CachePadded::new(AtomicU8::new(UNINIT));
static INIT_TID: AtomicI32 = AtomicI32::new(0);
static STATS_AT_EXIT: AtomicBool = AtomicBool::new(false);
static SHEAVES: AtomicBool = AtomicBool::new(false);
static LOCKS: [CpuLock; MAX_LINUX_CPUS] = [const { CpuLock::new() }; MAX_LINUX_CPUS];
pub(crate) static REGION: Region = Region::new();

struct KmCell(UnsafeCell<MaybeUninit<Kmalloc<Preload>>>);
// SAFETY: written once by the thread that wins UNINIT -> BUSY, read only
// after READY is published (Release/Acquire); `Kmalloc` is `Sync`.
unsafe impl Sync for KmCell {}
static KM: KmCell = KmCell(UnsafeCell::new(MaybeUninit::uninit()));

/// The caches, set up on first call; `None` while the calling thread is the
/// one setting them up (it re-entered) or if that failed.
#[inline(always)]
pub(crate) fn kmalloc() -> Option<&'static Kmalloc<Preload>> {
    kmalloc_if_ready().or_else(init)
}

/// The caches if they are set up, else `None` (without setting them up:
/// for a fast path whose miss calls one that does).
#[inline(always)]
pub(crate) fn kmalloc_if_ready() -> Option<&'static Kmalloc<Preload>> {
    if STATE.load(Ordering::Acquire) == READY {
        // SAFETY: READY was published after `KM` was written.
        return Some(unsafe { (*KM.0.get()).assume_init_ref() });
    }
    None
}

/// The caches, known to be set up: for `free` of a slab object, whose class
/// entry only exists because a `malloc` found them READY.
///
/// # Safety
/// A `malloc` that returned a slab object happened before this call (the
/// object's `free` is ordered after its `malloc`, and that `malloc` read
/// READY with Acquire after `KM` was written).
#[inline(always)]
pub(crate) unsafe fn kmalloc_ready() -> &'static Kmalloc<Preload> {
    // SAFETY: the caller's contract: `KM` was written and published.
    unsafe { (*KM.0.get()).assume_init_ref() }
}

fn gettid() -> i32 {
    // SAFETY: a raw syscall with no arguments (glibc's wrapper may read TLS).
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

#[cold]
#[inline(never)]
fn init() -> Option<&'static Kmalloc<Preload>> {
    loop {
        match STATE.compare_exchange(UNINIT, BUSY, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => break,
            Err(READY) => return kmalloc(),
            Err(FAILED) => return None,
            Err(_) => {
                if INIT_TID.load(Ordering::Relaxed) == gettid() {
                    return None;
                }
                std::thread::yield_now();
            }
        }
    }
    INIT_TID.store(gettid(), Ordering::Relaxed);
    // The sheaves front unless told otherwise: the faster here on most of
    // malloc-bench's workloads and on the real programs (BENCHMARKS.md).
    let sheaves = !env_is(c"KMM_SLUB_FRONT", b"tid");
    SHEAVES.store(sheaves, Ordering::Relaxed);
    STATS_AT_EXIT.store(env_is(c"KMM_SLUB_STATS", b"1"), Ordering::Relaxed);
    let flags = if sheaves {
        CacheFlags::SHEAVES
    } else {
        CacheFlags::empty()
    };
    let thp = !env_is(c"KMM_THP", b"0");
    let made = REGION
        .init(thp)
        .then(|| Kmalloc::with_config(&REGION, LinuxCpus::with_locks(&LOCKS), flags, config).ok())
        .flatten();
    let Some(km) = made else {
        STATE.store(FAILED, Ordering::Release);
        return None;
    };
    // SAFETY: we won UNINIT -> BUSY: the only writer, nobody reads before READY.
    unsafe { (*KM.0.get()).write(km) };
    STATE.store(READY, Ordering::Release);
    // May allocate (re-entering us, now READY).
    // SAFETY: the handlers are `extern "C"` functions valid for the process.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
    kmalloc()
}

/// Bytes of full sheaves a cache's barn may keep (sheaves front): a
/// program that frees a thousand blocks in a row (glibc-simple, alloc-test)
/// then exchanges sheaves with the barn instead of flushing them to slabs
/// (334 -> 188 instructions per malloc+free pair on glibc-simple under
/// callgrind; BENCHMARKS.md, session 10).
const BARN_BYTES: usize = 1 << 20;
/// Full sheaves per barn at most, however small the objects.
const BARN_MAX_FULL: usize = 64;

/// Objects of 1 KiB and more: a sheaf holds at most this many bytes of
/// them (see [`sheaf_capacity`]).
const SHEAF_BYTES: usize = 32 << 10;

/// Objects below 1 KiB: a sheaf holds at least this many bytes of them,
/// up to [`SMALL_SHEAF_MAX`] slots (see [`sheaf_capacity`]).
const SMALL_SHEAF_BYTES: usize = 8 << 10;

/// Most slots in a sheaf of small objects (its slot array: 2 KiB).
const SMALL_SHEAF_MAX: usize = 254;

/// Objects per sheaf for `size`-byte objects. Below 1 KiB, Linux's
/// capacity by size ([`slub_core::sheaf_capacity_for`]: 62 slots for
/// small objects, 30 from 256 bytes) or [`SMALL_SHEAF_BYTES`] of objects
/// if that is more, at most [`SMALL_SHEAF_MAX`] (8 to 32 bytes: 254, 64:
/// 128, 128: 64); from 1 KiB, [`SHEAF_BYTES`] of objects, between Linux's
/// (14, then 6 from a page) and the uniform 32.
///
/// Measured on a 16-CPU machine (BENCHMARKS.md, session 14): the uniform
/// 32 kept 1.7-2x mimalloc's peak RSS on mstress (two sheaves of 4 KiB
/// objects per CPU are 256 KiB); Linux's 14 slots for kmalloc-1k made
/// sh6bench at 16 threads 1.85x slower (half its blocks are 513-1006
/// bytes, and every 14th `malloc` went to the one barn lock).
///
/// Small objects' larger sheaves keep them on their CPU (session 19): a
/// CPU whose two sheaves are both full puts one in the barn, and a CPU
/// whose two are empty takes one from there, with its objects still in
/// the other CPU's cache. For one class's random walk of frees and
/// allocations those exchanges fall with the square of the capacity, so
/// the objects that change CPUs fall with the capacity. alloc-test at 2
/// threads, when this VM's cross-CPU transfers are slow, took 1.6x
/// mimalloc's time with 62 slots (half its samples in the benchmark's own
/// reads and writes of the objects) and 1.15x with these.
fn sheaf_capacity(size: usize) -> usize {
    let linux = slub_core::sheaf_capacity_for(size);
    if size < 1024 {
        return linux.max((SMALL_SHEAF_BYTES / size).min(SMALL_SHEAF_MAX));
    }
    (SHEAF_BYTES / size).clamp(linux, CacheConfig::default().sheaf_capacity)
}

/// The tunables of the cache of `size`-byte objects: Linux's defaults
/// (the sheaf capacity by object size, [`sheaf_capacity`]), but the barn
/// holds up to [`BARN_BYTES`] of full sheaves (never fewer sheaves
/// than Linux's 10, never more than [`BARN_MAX_FULL`]).
/// `KMM_SLUB_SHEAF` (objects per sheaf) and `KMM_SLUB_BARN` (full sheaves)
/// override, for experiments.
fn config(size: usize) -> CacheConfig {
    let d = CacheConfig::default();
    let sheaf = env_num(c"KMM_SLUB_SHEAF")
        .unwrap_or(sheaf_capacity(size))
        .max(1);
    let barn = (BARN_BYTES / (size * sheaf)).clamp(d.barn_max_full, BARN_MAX_FULL);
    CacheConfig {
        sheaf_capacity: sheaf,
        barn_max_full: env_num(c"KMM_SLUB_BARN").unwrap_or(barn),
        barn_max_empty: d.barn_max_empty.max(barn),
        // `free` finds a pointer's class in the region's table, filled
        // once per slab rather than checked on every `malloc`.
        new_slab: Some(NewSlabHook(note_slab)),
        // The per-hit counters only for the report (`init` reads
        // `KMM_SLUB_STATS` first): they cost a per-CPU load and store on
        // every `malloc` and `free` that hits.
        fast_path_stats: STATS_AT_EXIT.load(Ordering::Relaxed),
        ..d
    }
}

fn note_slab(slab: core::ptr::NonNull<u8>, bytes: usize, object_size: usize) {
    if let Some(class) = slub_core::kmalloc_index(object_size, 1) {
        REGION.note_slab(slab.as_ptr() as usize, bytes, class);
    }
}

/// Environment variable `name` as a number, if set and one.
fn env_num(name: &core::ffi::CStr) -> Option<usize> {
    // SAFETY: as in `env_is`.
    unsafe {
        let v = libc::getenv(name.as_ptr());
        if v.is_null() {
            return None;
        }
        core::str::from_utf8(core::ffi::CStr::from_ptr(v).to_bytes())
            .ok()?
            .parse()
            .ok()
    }
}

/// Whether environment variable `name` equals `want` (`getenv` does not
/// allocate).
fn env_is(name: &core::ffi::CStr, want: &[u8]) -> bool {
    // SAFETY: a NUL-terminated name; the result is null or a C string that
    // stays valid while the environment is not changed.
    unsafe {
        let v = libc::getenv(name.as_ptr());
        !v.is_null() && core::ffi::CStr::from_ptr(v).to_bytes() == want
    }
}

fn cpus() -> LinuxCpus {
    LinuxCpus::with_locks(&LOCKS)
}

/// Before `fork`: take every per-CPU lock (so no other thread is inside a
/// pinned section of the caches), then the region's lock.
extern "C" fn fork_prepare() {
    if STATE.load(Ordering::Acquire) != READY {
        return;
    }
    let c = cpus();
    for id in 0..c.nr_cpus() {
        loop {
            if let Some(g) = c.try_pin_id(id) {
                core::mem::forget(g);
                break;
            }
            std::thread::yield_now();
        }
    }
    // Then every lock inside the caches (a thread outside a pinned
    // section, freeing to another CPU's slab, may hold a node lock), then
    // the region's, which the caches' paths take last.
    if let Some(km) = kmalloc() {
        km.lock_for_fork();
    }
    REGION.lock_for_fork();
}

fn release_fork_locks() {
    if STATE.load(Ordering::Acquire) != READY {
        return;
    }
    // SAFETY: `fork_prepare` took them all and this thread is the only one
    // left that could hold them (the child) or their holder (the parent).
    unsafe {
        REGION.unlock_after_fork();
        if let Some(km) = kmalloc() {
            km.unlock_after_fork();
        }
        for l in cpus().locks() {
            l.unlock();
        }
    }
}

extern "C" fn fork_parent() {
    release_fork_locks();
}

extern "C" fn fork_child() {
    release_fork_locks();
}

/// Prints `msg` and the pointer to stderr and aborts.
#[cold]
#[inline(never)]
pub(crate) fn die(msg: &str, p: usize) -> ! {
    let mut b = report::Buf::new();
    let _ = core::fmt::Write::write_fmt(
        &mut b,
        format_args!("kmm-malloc: {msg} (pointer {p:#x}); aborting\n"),
    );
    b.flush_to_stderr();
    // SAFETY: no preconditions; does not return.
    unsafe { libc::abort() }
}

/// Shrinks every cache (each flushes every CPU's slab, partials and
/// sheaves: `LinuxCpus::on_each_cpu` takes each CPU's lock in turn) and
/// trims the region; returns the slabs plus pages given back.
pub(crate) fn trim() -> usize {
    let Some(km) = kmalloc() else {
        return 0;
    };
    km.shrink() + REGION.trim() / region::PAGE
}

#[cfg(test)]
mod stress_tests;

#[cfg(test)]
mod tests {
    use super::sheaf_capacity;

    #[test]
    fn sheaves_hold_8_kib_of_small_objects_and_linux_s_count_above() {
        let caps: Vec<usize> = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 16384]
            .iter()
            .map(|&s| sheaf_capacity(s))
            .collect();
        assert_eq!(caps, [254, 254, 254, 128, 64, 32, 30, 32, 16, 8, 6]);
    }
}
