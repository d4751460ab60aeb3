//! Bulk allocation and free, and prefilled reservations, on both fronts.
#![cfg(not(kmm_loom))]

use arch_api::PhysArena;
use slub_core::testing::HostedPlatform;
use slub_core::{
    AllocError, ArenaPages, CacheConfig, CacheFlags, FreeError, KmemCache, ThreadCpus,
};
use std::collections::HashSet;
use std::ptr::NonNull;

type Cache<'a> = KmemCache<HostedPlatform<ArenaPages<'a>, ThreadCpus>>;

const FRONTS: [CacheFlags; 2] = [CacheFlags::empty(), CacheFlags::SHEAVES];

fn scale(n: usize) -> usize {
    if cfg!(miri) { n.min(150) } else { n }
}

fn cache<'a>(a: &'a PhysArena, size: usize, flags: CacheFlags) -> Cache<'a> {
    KmemCache::new("bulk", size, 8, flags, ArenaPages::new(a), ThreadCpus).unwrap()
}

/// A small xorshift for shuffles (no dependency).
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

#[test]
fn bulk_objects_are_distinct_and_every_page_returns() {
    for flags in FRONTS {
        for size in [8usize, 64, 200, 4096] {
            let a = PhysArena::new(32 << 20, 4096).unwrap();
            let mut c = cache(&a, size, flags);
            let n = scale(5 * c.objects_per_slab() + 7);
            let mut objs = vec![NonNull::dangling(); n];
            c.alloc_bulk(&mut objs).unwrap();
            let set: HashSet<usize> = objs.iter().map(|p| p.as_ptr() as usize).collect();
            assert_eq!(set.len(), n, "{flags:?} {size}: an object handed out twice");
            for (i, p) in objs.iter().enumerate() {
                // SAFETY: a fresh object of `size` bytes.
                unsafe { p.as_ptr().write_bytes(i as u8, size) };
            }
            for (i, p) in objs.iter().enumerate() {
                // SAFETY: still allocated.
                assert_eq!(unsafe { *p.as_ptr().add(size - 1) }, i as u8);
            }
            // Frees in a shuffled order (several slabs interleaved), mixed
            // with single frees.
            shuffle(&mut objs, 0x9e37_79b9 ^ size as u64);
            let (single, bulk) = objs.split_at(n / 5);
            for &p in single {
                // SAFETY: allocated above, freed once.
                unsafe { c.free(p) }.unwrap();
            }
            // SAFETY: allocated above, freed once.
            unsafe { c.free_bulk(bulk) }.unwrap();
            c.destroy().unwrap();
            assert_eq!(a.frames_in_use(), 0, "{flags:?} {size}");
        }
    }
}

#[test]
fn bulk_and_single_paths_share_the_objects() {
    for flags in FRONTS {
        let a = PhysArena::new(32 << 20, 4096).unwrap();
        let mut c = cache(&a, 48, flags);
        let mut live: Vec<NonNull<u8>> = Vec::new();
        let mut seed = 0x1234_5678u64;
        for round in 0..scale(400) {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (seed >> 33) as usize % 70;
            match round % 4 {
                0 | 1 => {
                    let mut v = vec![NonNull::dangling(); k];
                    c.alloc_bulk(&mut v).unwrap();
                    live.extend(v);
                }
                2 => {
                    let k = k.min(live.len());
                    let v: Vec<_> = live.drain(..k).collect();
                    // SAFETY: allocated, freed once.
                    unsafe { c.free_bulk(&v) }.unwrap();
                }
                _ => {
                    live.push(c.alloc().unwrap());
                    if let Some(p) = live.pop() {
                        // SAFETY: allocated, freed once.
                        unsafe { c.free(p) }.unwrap();
                    }
                }
            }
            shuffle(&mut live, seed);
        }
        let set: HashSet<usize> = live.iter().map(|p| p.as_ptr() as usize).collect();
        assert_eq!(set.len(), live.len());
        // SAFETY: allocated, freed once.
        unsafe { c.free_bulk(&live) }.unwrap();
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}

#[test]
fn alloc_bulk_is_all_or_nothing() {
    for flags in FRONTS {
        // Room for the per-CPU arrays and a few slabs only.
        let a = PhysArena::new(64 << 10, 4096).unwrap();
        let config = CacheConfig {
            min_partial: 0,
            ..CacheConfig::default()
        };
        let mut c: Cache = KmemCache::with_config(
            "oom",
            256,
            8,
            flags,
            ArenaPages::new(&a),
            ThreadCpus,
            config,
        )
        .unwrap();
        let mut v = vec![NonNull::dangling(); 1000];
        assert_eq!(c.alloc_bulk(&mut v), Err(AllocError::OutOfMemory));
        // Nothing is left allocated: destroy finds no live object.
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}

#[test]
fn free_bulk_refuses_bad_pointers_and_frees_the_rest() {
    for flags in FRONTS {
        let a = PhysArena::new(8 << 20, 4096).unwrap();
        let mut c = cache(&a, 64, flags);
        let mut v = vec![NonNull::dangling(); 40];
        c.alloc_bulk(&mut v).unwrap();
        let bad = NonNull::new(v[3].as_ptr().wrapping_add(8)).unwrap();
        v.push(bad);
        // SAFETY: every good object allocated above; `bad` is inside one.
        let r = unsafe { c.free_bulk(&v) };
        assert_eq!(
            r,
            Err(FreeError::Misaligned {
                ptr: bad.as_ptr() as usize
            })
        );
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}

#[test]
fn prefilled_reservations_cannot_fail_and_return_their_leftovers() {
    for flags in FRONTS {
        let a = PhysArena::new(256 << 10, 4096).unwrap();
        let mut c = cache(&a, 512, flags);
        {
            let mut r = c.prefill(10).unwrap();
            assert_eq!(r.len(), 10);
            assert!(r.capacity() >= 10);
            // Exhaust the arena through the ordinary path.
            let mut others = Vec::new();
            while let Ok(p) = c.alloc() {
                others.push(p);
            }
            assert_eq!(c.alloc(), Err(AllocError::OutOfMemory));
            // The reservation still delivers its ten objects.
            let mine: Vec<_> = (0..7).map(|_| r.alloc().unwrap()).collect();
            let set: HashSet<_> = mine.iter().chain(&others).collect();
            assert_eq!(set.len(), mine.len() + others.len());
            assert_eq!(r.len(), 3);
            // Topping up fails without memory and keeps what is there.
            assert_eq!(r.refill(9), Err(AllocError::OutOfMemory));
            assert_eq!(r.len(), 3);
            // SAFETY: allocated above, freed once.
            unsafe { c.free_bulk(&others) }.unwrap();
            r.refill(9).unwrap();
            assert_eq!(r.len(), 9);
            assert_eq!(r.refill(r.capacity() + 1), Err(AllocError::BadLayout));
            let more: Vec<_> = (0..2).map(|_| r.alloc().unwrap()).collect();
            r.give_back().unwrap(); // the seven not drawn
            // SAFETY: allocated above, freed once.
            unsafe { c.free_bulk(&mine) }.unwrap();
            // An object drawn and not freed keeps destroy from succeeding.
            assert!(c.prefill(4).is_ok()); // dropped at once: all four back
            // SAFETY: allocated above, freed once.
            unsafe { c.free(more[0]) }.unwrap();
            // SAFETY: allocated above, freed once.
            unsafe { c.free(more[1]) }.unwrap();
        }
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}

#[test]
fn dropped_reservation_returns_everything() {
    for flags in FRONTS {
        let a = PhysArena::new(4 << 20, 4096).unwrap();
        let mut c = cache(&a, 64, flags);
        let mut r = c.prefill(scale(1000)).unwrap();
        let p = r.alloc().unwrap();
        drop(r);
        // SAFETY: drawn from the reservation, freed once.
        unsafe { c.free(p) }.unwrap();
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}
