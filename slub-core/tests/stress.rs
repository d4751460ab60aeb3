//! Scaled-down cross-thread stress (the 10M-operation run is
//! `cargo run --release -p slub-core --example stress`): threads allocate,
//! hand objects to each other, free them remotely; destroy must return
//! every page.
#![cfg(not(kmm_loom))]

use arch_api::PhysArena;
use slub_core::testing::HostedPlatform;
use slub_core::{ArenaPages, CacheFlags, KmemCache, ThreadCpus};
use std::sync::mpsc;

fn cross_thread(flags: CacheFlags, threads: usize, ops: usize) {
    let a = PhysArena::new(256 << 20, 4096).unwrap();
    let pages = ArenaPages::new(&a);
    let mut c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> =
        KmemCache::new("stress", 200, 8, flags, &pages, ThreadCpus).unwrap();
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<usize>()).unzip();
    let leftovers: Vec<mpsc::Receiver<usize>> = std::thread::scope(|s| {
        let handles: Vec<_> = rxs
            .into_iter()
            .enumerate()
            .map(|(t, rx)| {
                let c = &c;
                let next = txs[(t + 1) % threads].clone();
                s.spawn(move || {
                    let mut x = t as u64 * 7 + 3;
                    for i in 0..ops / threads {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let p = c.alloc().unwrap();
                        // SAFETY: ours.
                        unsafe { p.as_ptr().cast::<u64>().write(i as u64) };
                        if x % 2 == 0 {
                            let _ = next.send(p.as_ptr() as usize);
                        } else {
                            // SAFETY: allocated, freed once.
                            unsafe { c.free(p) }.unwrap();
                        }
                        while let Ok(q) = rx.try_recv() {
                            // SAFETY: handed to us by a neighbour, freed once.
                            unsafe { c.free(std::ptr::NonNull::new(q as *mut u8).unwrap()) }
                                .unwrap();
                        }
                    }
                    drop(next);
                    // Frees that arrive after our loop are drained below.
                    rx
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(txs);
    for rx in leftovers {
        while let Ok(q) = rx.try_recv() {
            // SAFETY: sent after its receiver stopped; freed once here.
            unsafe { c.free(std::ptr::NonNull::new(q as *mut u8).unwrap()) }.unwrap();
        }
    }
    c.destroy().expect("all objects were freed");
    assert_eq!(a.frames_in_use(), 0, "every page returned");
}

#[test]
fn cross_thread_stress_tid() {
    cross_thread(
        CacheFlags::empty(),
        4,
        if cfg!(miri) { 400 } else { 200_000 },
    );
}

#[test]
fn cross_thread_stress_sheaves() {
    cross_thread(
        CacheFlags::SHEAVES,
        4,
        if cfg!(miri) { 400 } else { 200_000 },
    );
}
