//! The 10M-operation cross-thread stress:
//! `cargo run --release -p slub-core --example stress -- [ops] [threads]`.
//! Threads allocate, hand half their objects to a neighbour that frees them
//! remotely, for both fronts; then `destroy` must succeed and every page must
//! be back in the arena. Exits non-zero otherwise.

use arch_api::sync::DefaultRawMutex;
use arch_api::{PhysArena, Platform, SoftTlbCpu};
use slub_core::{ArenaPages, CacheFlags, DefaultDwCas, KmemCache, ThreadCpus};
use std::marker::PhantomData;
use std::sync::mpsc;
use std::time::Instant;

/// The platform, named once: slab pages from a simulated physical arena,
/// each thread a CPU.
struct Hosted<'a>(PhantomData<&'a ()>);

// SAFETY: `ArenaPages` hands each range of its arena to one owner until it
// is freed and maps it linearly both ways (its `PageSource` promise);
// `ThreadCpus` upholds `CpuLocal`'s contract.
unsafe impl<'a> Platform for Hosted<'a> {
    type Layout = arch_ia64_sim::Ia64Sim; // vmalloc's tables (slabs map none)
    type Mem = &'a ArenaPages<'a>;
    type Tlb = SoftTlbCpu<'a>;
    type Cpu = ThreadCpus;
    type Lock = DefaultRawMutex;
    type DwCas = DefaultDwCas;
}

fn run(flags: CacheFlags, threads: usize, ops: usize) -> Result<(u64, u64), String> {
    let a = PhysArena::new(1 << 30, 4096).map_err(|e| e.to_string())?;
    let pages = ArenaPages::new(&a);
    let mut c: KmemCache<Hosted<'_>> =
        KmemCache::new("stress", 200, 8, flags, &pages, ThreadCpus).map_err(|e| e.to_string())?;
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<usize>()).unzip();
    let peak = std::sync::atomic::AtomicU64::new(0);
    let leftovers: Vec<mpsc::Receiver<usize>> = std::thread::scope(|s| {
        let handles: Vec<_> = rxs
            .into_iter()
            .enumerate()
            .map(|(t, rx)| {
                let (c, peak, a) = (&c, &peak, &a);
                let next = txs[(t + 1) % threads].clone();
                s.spawn(move || {
                    let mut x = t as u64 * 7 + 3;
                    for i in 0..ops / threads {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let p = c.alloc().expect("alloc");
                        // SAFETY: ours.
                        unsafe { p.as_ptr().cast::<u64>().write(i as u64) };
                        if x % 2 == 0 {
                            let _ = next.send(p.as_ptr() as usize);
                        } else {
                            // SAFETY: allocated, freed once.
                            unsafe { c.free(p) }.expect("free");
                        }
                        while let Ok(q) = rx.try_recv() {
                            // SAFETY: handed to us, freed once.
                            unsafe { c.free(std::ptr::NonNull::new(q as *mut u8).unwrap()) }
                                .expect("remote free");
                        }
                        if i % 65536 == 0 {
                            peak.fetch_max(a.frames_in_use(), std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    rx
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(txs);
    for rx in leftovers {
        while let Ok(q) = rx.try_recv() {
            // SAFETY: sent after its receiver stopped; freed once.
            unsafe { c.free(std::ptr::NonNull::new(q as *mut u8).unwrap()) }
                .map_err(|e| e.to_string())?;
        }
    }
    c.destroy().map_err(|e| e.to_string())?;
    Ok((a.frames_in_use(), peak.into_inner()))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ops: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(4).max(1);
    let mut bad = false;
    for (name, flags) in [
        ("tid", CacheFlags::empty()),
        ("sheaves", CacheFlags::SHEAVES),
    ] {
        let t = Instant::now();
        match run(flags, threads, ops) {
            Ok((leaked, peak)) => {
                println!(
                    "{name:8} ops={ops} threads={threads} wall_ms={} peak_frames={peak} leaked_pages={leaked}",
                    t.elapsed().as_millis()
                );
                bad |= leaked != 0;
            }
            Err(e) => {
                println!("{name:8} FAILED: {e}");
                bad = true;
            }
        }
    }
    std::process::exit(i32::from(bad));
}
