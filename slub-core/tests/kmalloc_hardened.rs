//! Hardened bucket sets: random kmalloc copies (`CONFIG_RANDOM_KMALLOC_CACHES`)
//! and dedicated bucket sets (`kmem_buckets_create`). Objects of different
//! call sites / sets must never share a slab; every free returns its object;
//! destroy leaves nothing. Both fronts.
#![cfg(not(kmm_loom))]

use arch_api::{HostedCpus, PhysArena};
use core::alloc::Layout;
use slub_core::testing::HostedPlatform;
use slub_core::{
    ArenaPages, CacheFlags, Kmalloc, KmemCache, NR_KMALLOC_CLASSES, NR_RANDOM_COPIES,
    RandomKmalloc, kmalloc_index,
};
use std::collections::HashSet;
use std::ptr::NonNull;

/// Four declared CPUs (this thread is CPU 0): per-CPU arrays of 4 lines
/// rather than `&cpus`'s 128, in each of the 204 caches of a
/// `RandomKmalloc` (Miri's time).
type P<'a> = HostedPlatform<&'a ArenaPages<'a>, &'a HostedCpus>;

fn cpus() -> HostedCpus {
    HostedCpus::new(4)
}

const FRONTS: [CacheFlags; 2] = [CacheFlags::empty(), CacheFlags::SHEAVES];
/// Object sizes tried: small, middle, page-sized classes (one under Miri).
const SIZES: &[usize] = if cfg!(miri) { &[256] } else { &[24, 256, 4096] };
/// Enough for a few hundred caches' per-CPU arrays and the slabs below.
const ARENA: u64 = 24 << 20;

fn l(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// Objects per round: the cache's objects per slab, three times (so that
/// each side spans several slabs), fewer under Miri.
fn count(c: &KmemCache<P<'_>>) -> usize {
    if cfg!(miri) {
        c.objects_per_slab() + 1
    } else {
        3 * c.objects_per_slab()
    }
}

/// The slab (a naturally aligned block of `slab_bytes`) of each object.
fn slabs_of(objs: &[NonNull<u8>], slab_bytes: usize) -> HashSet<usize> {
    objs.iter()
        .map(|p| p.as_ptr() as usize & !(slab_bytes - 1))
        .collect()
}

/// A caller key served by another copy than `a`.
fn other_caller(km: &RandomKmalloc<P<'_>>, a: usize) -> usize {
    (1..)
        .map(|k| a + 64 * k)
        .find(|&b| km.copy_index(b) != km.copy_index(a))
        .unwrap()
}

#[test]
fn two_callers_never_share_a_slab() {
    for flags in FRONTS {
        let arena = PhysArena::new(ARENA, 4096).unwrap();
        let pages = ArenaPages::new(&arena);
        let cpus = cpus();
        let mut km: RandomKmalloc<P> =
            RandomKmalloc::new(&pages, &cpus, flags, 0x5eed_0019).unwrap();
        let a = 0xffff_ffff_8100_1234usize;
        let b = other_caller(&km, a);
        for &size in SIZES {
            let i = kmalloc_index(size, 8).unwrap();
            let ca = &km.copy_caches()[km.copy_index(a) * NR_KMALLOC_CLASSES + i];
            let n = count(ca);
            let slab_bytes = ca.slab_bytes();
            // Interleaved, as two call sites racing for the same size.
            let (mut xa, mut xb, mut xg) = (vec![], vec![], vec![]);
            for _ in 0..n {
                xa.push(km.alloc_caller(l(size), a).unwrap());
                xb.push(km.alloc_caller(l(size), b).unwrap());
                xg.push(km.alloc(l(size)).unwrap());
            }
            let (sa, sb, sg) = (
                slabs_of(&xa, slab_bytes),
                slabs_of(&xb, slab_bytes),
                slabs_of(&xg, slab_bytes),
            );
            assert!(sa.len() > 1 || cfg!(miri), "spans several slabs");
            assert!(
                sa.is_disjoint(&sb),
                "{flags:?} {size}: callers share a slab"
            );
            assert!(sa.is_disjoint(&sg) && sb.is_disjoint(&sg));
            for ((pa, pb), pg) in xa.into_iter().zip(xb).zip(xg) {
                // SAFETY: allocated above with these layouts and keys.
                unsafe {
                    km.free_caller(pa, l(size), a).unwrap();
                    km.free_caller(pb, l(size), b).unwrap();
                    km.free(pg, l(size)).unwrap();
                }
            }
        }
        km.destroy().unwrap();
        drop(km);
        assert_eq!(arena.bytes_in_use(), 0, "everything returned");
    }
}

#[test]
fn call_sites_by_location() {
    let arena = PhysArena::new(ARENA, 4096).unwrap();
    let pages = ArenaPages::new(&arena);
    let cpus = cpus();
    // Two lines of code: under some seeds they share a copy (1 in 16);
    // take the first seed that separates them.
    for seed in 0.. {
        let mut km: RandomKmalloc<P> =
            RandomKmalloc::new(&pages, &cpus, CacheFlags::empty(), seed).unwrap();
        let (p, site_a) = km.alloc_here(l(64)).unwrap();
        let (q, site_b) = km.alloc_here(l(64)).unwrap();
        assert_ne!(site_a, site_b);
        let slab = km.general().caches()[3].slab_bytes() - 1;
        let separated = km.copy_index(site_a) != km.copy_index(site_b);
        if separated {
            assert_ne!(p.as_ptr() as usize & !slab, q.as_ptr() as usize & !slab);
        }
        // SAFETY: allocated above with these keys.
        unsafe {
            km.free_caller(p, l(64), site_a).unwrap();
            km.free_caller(q, l(64), site_b).unwrap();
        }
        km.destroy().unwrap();
        if separated {
            break;
        }
    }
    assert_eq!(arena.bytes_in_use(), 0);
}

#[test]
fn the_hash_uses_every_copy_and_depends_on_the_seed() {
    let arena = PhysArena::new(ARENA, 4096).unwrap();
    let pages = ArenaPages::new(&arena);
    let cpus = cpus();
    let k1: RandomKmalloc<P> = RandomKmalloc::new(&pages, &cpus, CacheFlags::empty(), 1).unwrap();
    let k2: RandomKmalloc<P> = RandomKmalloc::new(&pages, &cpus, CacheFlags::empty(), 2).unwrap();
    // Return addresses: a few bytes apart, as call sites are.
    let callers: Vec<usize> = (0..512).map(|i| 0x40_1000 + 13 * i).collect();
    let used: HashSet<usize> = callers.iter().map(|&c| k1.copy_index(c)).collect();
    assert_eq!(used.len(), NR_RANDOM_COPIES);
    let moved = callers
        .iter()
        .filter(|&&c| k1.copy_index(c) != k2.copy_index(c))
        .count();
    assert!(moved > callers.len() / 2, "{moved}");
    assert_eq!(k1.copy_caches()[13].name(), "kmalloc-rnd-01-16");
}

#[test]
fn large_sizes_and_plain_kmalloc_keys() {
    let arena = PhysArena::new(ARENA, 4096).unwrap();
    let pages = ArenaPages::new(&arena);
    let cpus = cpus();
    let mut km: RandomKmalloc<P> =
        RandomKmalloc::new(&pages, &cpus, CacheFlags::SHEAVES, 7).unwrap();
    let p = km.alloc_caller(l(40_000), 0x1234).unwrap();
    assert!(km.general().large_bytes() >= 40_000);
    // SAFETY: allocated above.
    unsafe { km.free_caller(p, l(40_000), 0x1234) }.unwrap();
    assert_eq!(km.general().large_bytes(), 0);
    km.destroy().unwrap();
    // The plain kmalloc takes a key and ignores it.
    let mut plain: Kmalloc<P> = Kmalloc::new(&pages, &cpus, CacheFlags::empty()).unwrap();
    let p = plain.alloc_caller(l(100), 1).unwrap();
    assert_eq!(plain.caches()[4].nr_slabs(), 1);
    // SAFETY: allocated above.
    unsafe { plain.free_caller(p, l(100), 2) }.unwrap();
    plain.destroy().unwrap();
    drop((km, plain));
    assert_eq!(arena.bytes_in_use(), 0);
}

#[test]
fn bucket_sets_never_share_a_slab_with_kmalloc() {
    for flags in FRONTS {
        let arena = PhysArena::new(ARENA, 4096).unwrap();
        let pages = ArenaPages::new(&arena);
        let cpus = cpus();
        let mut km: Kmalloc<P> = Kmalloc::new(&pages, &cpus, flags).unwrap();
        let mut msg = km.buckets("msg_msg").unwrap();
        let mut xattr = km.buckets("xattr").unwrap();
        assert_eq!(msg.name(), "msg_msg");
        assert_eq!(msg.caches()[2].flags(), flags);
        for &size in SIZES {
            let i = kmalloc_index(size, 8).unwrap();
            let n = count(&km.caches()[i]);
            let slab_bytes = km.caches()[i].slab_bytes();
            let (mut xg, mut xm, mut xx) = (vec![], vec![], vec![]);
            for _ in 0..n {
                xg.push(km.alloc(l(size)).unwrap());
                xm.push(msg.alloc(l(size)).unwrap());
                xx.push(xattr.alloc(l(size)).unwrap());
            }
            let (sg, sm, sx) = (
                slabs_of(&xg, slab_bytes),
                slabs_of(&xm, slab_bytes),
                slabs_of(&xx, slab_bytes),
            );
            assert!(sg.is_disjoint(&sm), "{flags:?} {size}: set shares a slab");
            assert!(sg.is_disjoint(&sx) && sm.is_disjoint(&sx));
            assert_eq!(msg.caches()[i].slabinfo().name, "msg_msg");
            for ((g, m), x) in xg.into_iter().zip(xm).zip(xx) {
                // SAFETY: allocated above from these sets with these layouts.
                unsafe {
                    km.free(g, l(size)).unwrap();
                    msg.free(m, l(size)).unwrap();
                    xattr.free(x, l(size)).unwrap();
                }
            }
        }
        let big = msg.alloc(l(20_000)).unwrap();
        assert!(msg.large_bytes() >= 20_000 && km.large_bytes() == 0);
        // SAFETY: allocated above.
        unsafe { msg.free(big, l(20_000)) }.unwrap();
        msg.destroy().unwrap();
        xattr.destroy().unwrap();
        km.destroy().unwrap();
        drop((msg, xattr, km));
        assert_eq!(arena.bytes_in_use(), 0, "everything returned");
    }
}

/// Under `debug`, a free through the wrong set or the wrong caller key is
/// refused (the slab's header names another cache) and the object stays
/// where it was.
#[cfg(feature = "debug")]
#[test]
fn mismatched_frees_are_refused_under_debug() {
    use slub_core::FreeError;
    for flags in FRONTS {
        let arena = PhysArena::new(ARENA, 4096).unwrap();
        let pages = ArenaPages::new(&arena);
        let cpus = cpus();
        let km: Kmalloc<P> = Kmalloc::new(&pages, &cpus, flags).unwrap();
        let msg = km.buckets("msg_msg").unwrap();
        let p = msg.alloc(l(96)).unwrap();
        // SAFETY: refused before the object is touched.
        let r = unsafe { km.free(p, l(96)) };
        assert!(matches!(r, Err(FreeError::ForeignPointer { .. })), "{r:?}");
        // SAFETY: the right set now.
        unsafe { msg.free(p, l(96)) }.unwrap();

        let rk: RandomKmalloc<P> = RandomKmalloc::new(&pages, &cpus, flags, 3).unwrap();
        let a = 0x8000_0000usize;
        let b = other_caller(&rk, a);
        let p = rk.alloc_caller(l(96), a).unwrap();
        // SAFETY: refused before the object is touched.
        let r = unsafe { rk.free_caller(p, l(96), b) };
        assert!(matches!(r, Err(FreeError::ForeignPointer { .. })), "{r:?}");
        // SAFETY: refused as well: the general caches.
        assert!(unsafe { rk.free(p, l(96)) }.is_err());
        // SAFETY: the right key now.
        unsafe { rk.free_caller(p, l(96), a) }.unwrap();
    }
}

/// A site is its key's copy: its objects come from the copy `alloc_caller`
/// uses for that key, from no other copy's slabs, and either way of freeing
/// takes them back.
#[test]
fn a_site_serves_its_keys_copy() {
    for flags in FRONTS {
        let arena = PhysArena::new(ARENA, 4096).unwrap();
        let pages = ArenaPages::new(&arena);
        let cpus = cpus();
        let mut km: RandomKmalloc<P> = RandomKmalloc::new(&pages, &cpus, flags, 0x51e).unwrap();
        let a = 0xffff_ffff_8100_4321usize;
        let b = other_caller(&km, a);
        let (sa, sb) = (km.site(a), km.site(b));
        for &size in SIZES {
            let i = kmalloc_index(size, 8).unwrap();
            let ca = &km.copy_caches()[km.copy_index(a) * NR_KMALLOC_CLASSES + i];
            assert!(core::ptr::eq(&sa.caches()[i], ca), "the key's copy");
            let n = count(ca);
            let xa: Vec<_> = (0..n).map(|_| sa.alloc(l(size)).unwrap()).collect();
            let xb: Vec<_> = (0..n).map(|_| sb.alloc(l(size)).unwrap()).collect();
            let slab = ca.slab_bytes();
            assert!(
                slabs_of(&xa, slab).is_disjoint(&slabs_of(&xb, slab)),
                "two sites share a slab"
            );
            assert!(ca.nr_slabs() > 0, "served by the key's copy");
            for (j, p) in xa.into_iter().enumerate() {
                if j % 2 == 0 {
                    // SAFETY: allocated above through `sa`, freed once.
                    unsafe { sa.free(p, l(size)) }.unwrap();
                } else {
                    // SAFETY: as above, by the key the site stands for.
                    unsafe { km.free_caller(p, l(size), a) }.unwrap();
                }
            }
            for p in xb {
                // SAFETY: allocated above through `sb`, freed once.
                unsafe { sb.free(p, l(size)) }.unwrap();
            }
        }
        // Destroy refuses live objects: every one came back.
        km.destroy().unwrap();
        drop(km);
        assert_eq!(arena.bytes_in_use(), 0, "everything returned");
    }
}

/// Both are shared between CPUs as `Kmalloc` is.
#[allow(dead_code)]
fn shareable() {
    fn check<T: Send + Sync>() {}
    check::<RandomKmalloc<P<'static>>>();
    check::<slub_core::KmemBuckets<P<'static>>>();
    check::<Kmalloc<P<'static>>>();
}
