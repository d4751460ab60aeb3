//! krealloc through the public API, in every feature configuration: in
//! place within a size class, moved across classes, zeroing, large blocks.
#![cfg(not(kmm_loom))]

use arch_api::PhysArena;
use core::alloc::Layout;
use slub_core::testing::HostedPlatform;
use slub_core::{ArenaPages, CacheFlags, Kmalloc, ThreadCpus};
use std::ptr::NonNull;

type Km<'a> = Kmalloc<HostedPlatform<&'a ArenaPages<'a>, ThreadCpus>>;

fn l(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

fn fill(p: NonNull<u8>, n: usize, v: u8) {
    // SAFETY: the caller's object holds `n` bytes.
    unsafe { p.as_ptr().write_bytes(v, n) };
}

fn read(p: NonNull<u8>, i: usize) -> u8 {
    // SAFETY: the caller's object holds byte `i`.
    unsafe { *p.as_ptr().add(i) }
}

#[test]
fn krealloc_in_place_moves_and_zeroes() {
    for flags in [CacheFlags::empty(), CacheFlags::SHEAVES] {
        let a = PhysArena::new(16 << 20, 4096).unwrap();
        let pages = ArenaPages::new(&a);
        let mut km: Km = Kmalloc::new(&pages, ThreadCpus, flags).unwrap();
        let p = km.alloc(l(33)).unwrap();
        fill(p, 33, 0xa1);
        // Grow within kmalloc-64: same object, new bytes zeroed.
        // SAFETY: allocated with 33 bytes.
        let q = unsafe { km.krealloc(p, l(33), 64, true) }.unwrap();
        assert_eq!(q, p);
        assert_eq!(read(q, 32), 0xa1);
        assert!((33..64).all(|i| read(q, i) == 0));
        // Shrink within the class: kept.
        // SAFETY: now 64 bytes.
        let q = unsafe { km.krealloc(q, l(64), 40, false) }.unwrap();
        assert_eq!(q, p);
        // Shrink into kmalloc-16: moved (freed later with 10 bytes).
        // SAFETY: now 40 bytes.
        let s = unsafe { km.krealloc(q, l(40), 10, false) }.unwrap();
        assert_ne!(s, q);
        assert!((0..10).all(|i| read(s, i) == 0xa1));
        // Grow into a large block and back.
        // SAFETY: now 10 bytes.
        let big = unsafe { km.krealloc(s, l(10), 40_000, true) }.unwrap();
        assert!((0..10).all(|i| read(big, i) == 0xa1));
        assert!((10..40_000).step_by(997).all(|i| read(big, i) == 0));
        assert!(km.large_bytes() >= 40_000);
        // Within the same pages: kept.
        // SAFETY: now 40 000 bytes.
        let big2 = unsafe { km.krealloc(big, l(40_000), 40_900, true) }.unwrap();
        assert_eq!(big2, big);
        // SAFETY: now 40 900 bytes.
        let small = unsafe { km.krealloc(big2, l(40_900), 100, false) }.unwrap();
        assert_eq!(km.large_bytes(), 0);
        assert!((0..10).all(|i| read(small, i) == 0xa1));
        // SAFETY: now 100 bytes, freed once.
        unsafe { km.free(small, l(100)) }.unwrap();
        km.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}
