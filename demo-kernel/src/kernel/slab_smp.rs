//! `slab-smp`: the slab allocator on every CPU at once, once per front
//! (slub-core's tid fast path and the sheaves, `CacheFlags::SHEAVES`), on a
//! cache of its own, on which every CPU's tick allocates and frees too
//! (`tick_cache.rs`: the interrupt meets the interrupted code on the same
//! cache and CPU), while the ticks allocate on the kmalloc caches as well:
//!
//! 1. kmalloc pairs: each CPU allocates and frees one object `PAIRS` times
//!    (the fast path, per-CPU state only);
//! 2. producer/consumer: each CPU allocates `REMOTE` objects, stamps them
//!    and hands them to the next CPU through a mailbox; that CPU checks the
//!    stamp and frees them, so every free is a remote free into a slab
//!    another CPU allocated from;
//! 3. alloc/stamp/check/free on until 4 of the CPU's ticks allocated on
//!    the cache meanwhile (`tick_cache::churn_until_ticks`);
//! 4. CPU 0 shrinks the cache (`kmem_cache_shrink`): every CPU flushes its
//!    slab, partial slabs, detached freelist and sheaves in the handler of
//!    an IPI (`CpuLocal::on_each_cpu`, Linux's `flush_all`), so no slab may
//!    be left, as no object is live;
//! 5. CPU 0 destroys the cache, which fails on a live object or a slab
//!    not back (`kmem_cache_destroy`): every page returned.

use super::stale_check::MAX;
use super::{check, kprint};
use crate::arch;
use crate::frames::Frames;
use crate::platform::DemoKernel;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use slub_core::{CacheFlags, KmemCache};

/// Pairs per CPU and objects each CPU hands on, scaled down for emulation
/// (each front's run stays well under a second at `--smp 4`).
const PAIRS: u64 = 2000;
const REMOTE: u64 = 400;
/// Object size, and mailbox slots per CPU.
const SIZE: usize = 64;
const SLOTS: usize = 16;

static CACHE: AtomicPtr<KmemCache<DemoKernel>> = AtomicPtr::new(core::ptr::null_mut());
/// CPU `c`'s outbox: CPU `c + 1` (mod the online CPUs) empties it. A slot
/// is null or holds an object its producer stamped (Release / Acquire).
static MAILBOX: [[AtomicPtr<u8>; SLOTS]; MAX] =
    [const { [const { AtomicPtr::new(core::ptr::null_mut()) }; SLOTS] }; MAX];
static PAIR_CYCLES: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
static REMOTE_CYCLES: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
static BAD: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
static ERRORS: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];

/// The stamp of object `seq` of producer `cpu`.
fn stamp(cpu: usize, seq: u64) -> u64 {
    (cpu as u64 + 1) << 48 | seq
}

fn worker(cpu: usize) {
    // SAFETY: `run_front` stored the cache before `run_on_all` and destroys
    // it only after every CPU returned.
    let cache = unsafe { &*CACHE.load(Ordering::Relaxed) };
    let n = arch::online().min(MAX);
    let (mut bad, mut errors) = (0u64, 0u64);

    let t0 = arch::cycles();
    for i in 0..PAIRS {
        match cache.alloc() {
            Ok(p) => {
                // SAFETY: a fresh object of `SIZE` bytes, freed once below.
                unsafe {
                    p.as_ptr().cast::<u64>().write_volatile(i);
                    errors += u64::from(cache.free(p).is_err());
                }
            }
            Err(_) => errors += 1,
        }
    }
    let t1 = arch::cycles();

    let outbox = &MAILBOX[cpu];
    let from = (cpu + n - 1) % n;
    let inbox = &MAILBOX[from];
    let (mut sent, mut got, mut seq_in) = (0u64, 0u64, 0u64);
    let (mut out_i, mut in_i) = (0usize, 0usize);
    while sent < REMOTE || got < REMOTE {
        if sent < REMOTE && outbox[out_i].load(Ordering::Acquire).is_null() {
            match cache.alloc() {
                Ok(p) => {
                    // SAFETY: a fresh object of `SIZE` bytes, this CPU's
                    // until it is published below.
                    unsafe {
                        p.as_ptr().write_bytes(cpu as u8, SIZE);
                        p.as_ptr().cast::<u64>().write(stamp(cpu, sent));
                    }
                    outbox[out_i].store(p.as_ptr(), Ordering::Release);
                }
                Err(_) => errors += 1,
            }
            sent += 1;
            out_i = (out_i + 1) % SLOTS;
        }
        if got < REMOTE {
            let p = inbox[in_i].swap(core::ptr::null_mut(), Ordering::Acquire);
            if let Some(p) = NonNull::new(p) {
                // SAFETY: published by the producer after stamping; this
                // CPU took it out of the slot and owns it now.
                let (word, last) = unsafe {
                    (
                        p.as_ptr().cast::<u64>().read(),
                        p.as_ptr().add(SIZE - 1).read(),
                    )
                };
                if word != stamp(from, seq_in) || last != from as u8 {
                    bad += 1;
                }
                // SAFETY: an object of this cache, freed once, here.
                errors += u64::from(unsafe { cache.free(p) }.is_err());
                got += 1;
                seq_in += 1;
                in_i = (in_i + 1) % SLOTS;
            } else if sent >= REMOTE {
                core::hint::spin_loop();
            }
        }
    }
    let t2 = arch::cycles();
    // Then on until a few ticks allocated on the cache meanwhile.
    bad += super::tick_cache::churn_until_ticks(cpu, cache);
    PAIR_CYCLES[cpu].store((t1 - t0) / PAIRS, Ordering::Relaxed);
    REMOTE_CYCLES[cpu].store((t2 - t1) / REMOTE, Ordering::Relaxed);
    BAD[cpu].store(bad, Ordering::Relaxed);
    ERRORS[cpu].store(errors, Ordering::Relaxed);
}

fn print_list(key: &str, a: &[AtomicU64; MAX], cpus: usize) {
    kprint!(",\"{key}\":[");
    for (c, v) in a.iter().enumerate().take(cpus) {
        kprint!(
            "{}{}",
            if c == 0 { "" } else { "," },
            v.load(Ordering::Relaxed)
        );
    }
    kprint!("]");
}

fn run_front(name: &'static str, flags: CacheFlags) {
    let cpus = arch::online().min(MAX);
    let mut cache =
        match KmemCache::<DemoKernel>::new(name, SIZE, 8, flags, Frames, arch::cpus_online()) {
            Ok(c) => c,
            Err(e) => {
                check(false, format_args!("slab-smp {name}: cache: {e:?}"));
                return;
            }
        };
    CACHE.store(&mut cache, Ordering::Relaxed);
    super::tick_cache::attach(&cache);
    arch::run_on_all(worker);
    let (irq_allocs, irq_bad) = super::tick_cache::detach(&cache, cpus);
    CACHE.store(core::ptr::null_mut(), Ordering::Relaxed);
    let slabs = cache.nr_slabs();
    // Every object is freed: a shrink that reaches every CPU leaves no slab.
    let shrunk = cache.shrink();
    let after_shrink = cache.nr_slabs();
    let destroyed = cache.destroy();
    kprint!(
        "{{\"workload\":\"slab-smp\",\"arch\":\"{}\",\"cpus\":{cpus},\"front\":\"{name}\",\"object_size\":{SIZE},\"pairs_per_cpu\":{PAIRS},\"remote_frees_per_cpu\":{REMOTE}",
        arch::NAME
    );
    print_list("pair_cycles_per_cpu", &PAIR_CYCLES, cpus);
    print_list("remote_cycles_per_cpu", &REMOTE_CYCLES, cpus);
    let sum = |a: &[AtomicU64; MAX]| {
        a[..cpus]
            .iter()
            .map(|x| x.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let (bad, errors) = (sum(&BAD), sum(&ERRORS));
    kprint!(
        ",\"pattern_violations\":{bad},\"errors\":{errors},\"irq_allocs\":{irq_allocs},\"irq_objects_overwritten\":{irq_bad},\"slabs_before_shrink\":{slabs},\"slabs_shrunk\":{shrunk},\"slabs_after_shrink\":{after_shrink},\"destroyed\":{}}}\n",
        destroyed.is_ok()
    );
    check(
        bad == 0 && errors == 0,
        format_args!("slab-smp {name}: {bad} bad stamps, {errors} errors"),
    );
    check(
        irq_bad == 0,
        format_args!("slab-smp {name}: {irq_bad} tick objects overwritten or refused"),
    );
    // The ticks ran on the cache (every CPU churns until some did).
    check(
        irq_allocs > 0 || arch::tick_counts(0).is_none(),
        format_args!("slab-smp {name}: no tick allocated on the cache"),
    );
    check(
        after_shrink == 0,
        format_args!("slab-smp {name}: {after_shrink} of {slabs} slabs left after a shrink"),
    );
    check(
        destroyed.is_ok(),
        format_args!("slab-smp {name}: {slabs} slabs, destroy: {destroyed:?}"),
    );
}

/// Runs both fronts.
pub fn run() {
    run_front("slab-smp-tid", CacheFlags::empty());
    run_front("slab-smp-sheaves", CacheFlags::SHEAVES);
}
