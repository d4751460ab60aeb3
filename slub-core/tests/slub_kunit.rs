//! Linux's `lib/tests/slub_kunit.c` cases, each written here from its
//! description: the `debug` checks must catch every corruption and report
//! it with the object and the offset, through the checked API (an error,
//! never a panic). `test_kfree_rcu*` wait for deferred frees.
#![cfg(all(feature = "debug", not(kmm_loom)))]

use arch_api::PhysArena;
use core::alloc::Layout;
use slub_core::hardening::{POISON_FREE, SLUB_RED_ACTIVE};
use slub_core::testing::HostedPlatform;
use slub_core::{
    AllocError, ArenaPages, CacheFlags, DestroyError, FreeError, Kmalloc, KmemCache, ThreadCpus,
};
use std::ptr::NonNull;

type Cache<'a> = KmemCache<HostedPlatform<ArenaPages<'a>, ThreadCpus>>;
type Km<'a> = Kmalloc<HostedPlatform<&'a ArenaPages<'a>, ThreadCpus>>;

const FRONTS: [CacheFlags; 2] = [CacheFlags::empty(), CacheFlags::SHEAVES];

fn arena() -> PhysArena {
    PhysArena::new(8 << 20, 4096).unwrap()
}

/// A 64-byte cache ("TestSlub_*" in the kunit file).
fn cache(a: &PhysArena, flags: CacheFlags) -> Cache<'_> {
    KmemCache::new("TestSlub", 64, 8, flags, ArenaPages::new(a), ThreadCpus).unwrap()
}

fn addr(p: NonNull<u8>) -> usize {
    p.as_ptr() as usize
}

/// Writes byte `off` of `p` (a deliberate corruption).
fn poke(p: NonNull<u8>, off: usize, v: u8) {
    // SAFETY: `p` is an object (or a freed object) of a live slab and `off`
    // lies in its slot: slab memory, written on purpose.
    unsafe { p.as_ptr().add(off).write(v) };
}

/// `test_clobber_zone`: a write into the red zone right after an allocated
/// object is reported when it is freed.
#[test]
fn test_clobber_zone() {
    for flags in FRONTS {
        let a = arena();
        let c = cache(&a, flags);
        let p = c.alloc().unwrap();
        poke(p, 64, 0xbc);
        // SAFETY: allocated above; refused, so not freed.
        let r = unsafe { c.free(p) };
        assert_eq!(
            r,
            Err(FreeError::RedZoneOverwritten {
                ptr: addr(p),
                offset: 64
            }),
            "{flags:?}"
        );
    }
}

/// `test_next_pointer`: the (obfuscated) free pointer of a freed object is
/// corrupted; the allocation that would follow it reports the object and
/// the pointer's offset and follows nothing; once the pointer is restored
/// the cache works again. The tid front: a freed object sits on a freelist
/// (on the sheaves front it sits in a sheaf, its free pointer unused).
#[test]
fn test_next_pointer() {
    let a = arena();
    let c = cache(&a, CacheFlags::empty());
    let keep = c.alloc().unwrap();
    let p = c.alloc().unwrap();
    // SAFETY: allocated above, freed once.
    unsafe { c.free(p) }.unwrap();
    // Under `debug` the pointer sits after the object and its red zone.
    let fp = 64 + 8u32;
    // SAFETY: the free pointer word of a freed object of a live slab.
    let word = unsafe { &mut *(p.as_ptr().add(fp as usize) as *mut u64) };
    let saved = *word;
    *word ^= 0x1234_5678_9abc;
    match c.alloc() {
        Err(AllocError::FreelistCorrupted { object, offset, .. }) => {
            assert_eq!((object, offset), (addr(p), fp));
        }
        other => panic!("corruption not detected: {other:?}"),
    }
    *word = saved;
    let q = c.alloc().unwrap();
    assert_eq!(q, p, "the object was not consumed by the failed allocation");
    // SAFETY: allocated above, freed once.
    unsafe { c.free_bulk(&[q, keep]) }.unwrap();
}

/// `test_first_word`: the first word of a freed, poisoned object is
/// overwritten; handing it out again reports offset 0.
#[test]
fn test_first_word() {
    for flags in FRONTS {
        let a = arena();
        let c = cache(&a, flags);
        let p = c.alloc().unwrap();
        // SAFETY: allocated above, freed once.
        unsafe { c.free(p) }.unwrap();
        // SAFETY: a deliberate use after free (slab memory).
        assert_eq!(unsafe { *p.as_ptr() }, POISON_FREE);
        poke(p, 0, 0x78);
        assert_eq!(
            c.alloc(),
            Err(AllocError::PoisonOverwritten {
                object: addr(p),
                offset: 0
            }),
            "{flags:?}"
        );
    }
}

/// `test_clobber_50th_byte`: the 50th byte of a freed object is
/// overwritten; reported with offset 50.
#[test]
fn test_clobber_50th_byte() {
    for flags in FRONTS {
        let a = arena();
        let c = cache(&a, flags);
        let p = c.alloc().unwrap();
        // SAFETY: allocated above, freed once.
        unsafe { c.free(p) }.unwrap();
        poke(p, 50, 0x9a);
        assert_eq!(
            c.alloc(),
            Err(AllocError::PoisonOverwritten {
                object: addr(p),
                offset: 50
            }),
            "{flags:?}"
        );
    }
}

/// `test_clobber_redzone_free`: the red zone of a freed object is written;
/// reported (offset 64, past the object) when the object is next handed
/// out.
#[test]
fn test_clobber_redzone_free() {
    for flags in FRONTS {
        let a = arena();
        let c = cache(&a, flags);
        let p = c.alloc().unwrap();
        // SAFETY: allocated above, freed once.
        unsafe { c.free(p) }.unwrap();
        poke(p, 64, 0xab);
        assert_eq!(
            c.alloc(),
            Err(AllocError::PoisonOverwritten {
                object: addr(p),
                offset: 64
            }),
            "{flags:?}"
        );
    }
}

/// `test_kmalloc_redzone_access`: an 18-byte kmalloc is served from
/// kmalloc-32; bytes 18..32 are red zone, so writing byte 18 or 19 is
/// caught at free with that offset, and an object written only inside its
/// 18 bytes frees cleanly.
#[test]
fn test_kmalloc_redzone_access() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let km: Km = Kmalloc::new(&pages, ThreadCpus, flags).unwrap();
        let l = Layout::from_size_align(18, 8).unwrap();
        let ok = km.alloc(l).unwrap();
        // SAFETY: 18 bytes are ours.
        unsafe { ok.as_ptr().write_bytes(0x11, 18) };
        // SAFETY: allocated above with `l`, freed once.
        unsafe { km.free(ok, l) }.unwrap();
        for off in [18u32, 19, 31] {
            let p = km.alloc(l).unwrap();
            // SAFETY: a fresh object; the kmalloc red zone is in place.
            assert_eq!(unsafe { *p.as_ptr().add(off as usize) }, SLUB_RED_ACTIVE);
            poke(p, off as usize, 0xab);
            // SAFETY: allocated above with `l`; refused, so not freed.
            let r = unsafe { km.free(p, l) };
            assert_eq!(
                r,
                Err(FreeError::RedZoneOverwritten {
                    ptr: addr(p),
                    offset: off
                }),
                "{flags:?} offset {off}"
            );
        }
    }
}

/// `test_leak_destroy`: destroying a cache with an object still allocated
/// reports it and frees nothing: the object stays usable, and the cache
/// too, until it is freed and the destroy succeeds.
#[test]
fn test_leak_destroy() {
    for flags in FRONTS {
        let a = arena();
        let mut c = cache(&a, flags);
        let p = c.alloc().unwrap();
        let slabs = c.nr_slabs();
        assert_eq!(
            c.destroy(),
            Err(DestroyError::LiveObjects { remaining: 1 }),
            "{flags:?}"
        );
        assert_eq!(c.nr_slabs(), slabs, "nothing freed under the object");
        // SAFETY: still ours.
        unsafe { p.as_ptr().write_bytes(7, 64) };
        let q = c.alloc().unwrap();
        // SAFETY: allocated above, freed once.
        unsafe { c.free_bulk(&[p, q]) }.unwrap();
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}

/// `test_krealloc_redzone_zeroing`: a 48-byte kmalloc (kmalloc-64) filled
/// with 0xff; krealloc with zeroing to 40 keeps it and makes 40..64 red
/// zone; to 56 zeroes 40..56 and leaves 56..64 red zone; the checks find
/// nothing wrong; to 112 moves it to kmalloc-128 with 0..56 kept and
/// 56..112 zeroed.
#[test]
fn test_krealloc_redzone_zeroing() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let km: Km = Kmalloc::new(&pages, ThreadCpus, flags).unwrap();
        let at = |p: NonNull<u8>, i: usize| {
            // SAFETY: `i` lies inside the object's 64 or 128 bytes.
            unsafe { *p.as_ptr().add(i) }
        };
        let l48 = Layout::from_size_align(48, 8).unwrap();
        let p = km.alloc(l48).unwrap();
        // SAFETY: 48 bytes are ours.
        unsafe { p.as_ptr().write_bytes(0xff, 48) };
        // Shrink.
        // SAFETY: allocated with `l48`.
        let p = unsafe { km.krealloc(p, l48, 40, true) }.unwrap();
        for i in 40..64 {
            assert_eq!(at(p, i), SLUB_RED_ACTIVE, "{flags:?} shrink, byte {i}");
        }
        // Grow within the same 64-byte object.
        let l40 = Layout::from_size_align(40, 8).unwrap();
        // SAFETY: now 40 bytes of kmalloc-64.
        let q = unsafe { km.krealloc(p, l40, 56, true) }.unwrap();
        assert_eq!(q, p, "grown in place");
        for i in 40..56 {
            assert_eq!(at(q, i), 0, "{flags:?} grow, byte {i}");
        }
        for i in 56..64 {
            assert_eq!(at(q, i), SLUB_RED_ACTIVE, "{flags:?} grow, byte {i}");
        }
        // Grow into kmalloc-128.
        // SAFETY: 56 bytes are ours.
        unsafe { q.as_ptr().write_bytes(0xff, 56) };
        let l56 = Layout::from_size_align(56, 8).unwrap();
        // SAFETY: now 56 bytes of kmalloc-64; its red zones are intact, so
        // the free inside krealloc succeeds.
        let r = unsafe { km.krealloc(q, l56, 112, true) }.unwrap();
        assert_ne!(r, q, "moved to a bigger class");
        for i in 0..56 {
            assert_eq!(at(r, i), 0xff, "{flags:?} move, byte {i}");
        }
        for i in 56..112 {
            assert_eq!(at(r, i), 0, "{flags:?} move, byte {i}");
        }
        for i in 112..128 {
            assert_eq!(at(r, i), SLUB_RED_ACTIVE, "{flags:?} move, byte {i}");
        }
        // SAFETY: allocated with 112 bytes, freed once.
        unsafe { km.free(r, Layout::from_size_align(112, 8).unwrap()) }.unwrap();
    }
}

/// krealloc refuses to move an object whose red zone was overwritten: the
/// error names the object and the offset and the object stays.
#[test]
fn krealloc_reports_an_overwritten_red_zone() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let km: Km = Kmalloc::new(&pages, ThreadCpus, CacheFlags::empty()).unwrap();
    let l = Layout::from_size_align(20, 8).unwrap();
    let p = km.alloc(l).unwrap();
    poke(p, 21, 0);
    // SAFETY: allocated with `l`; the move's free refuses it.
    let r = unsafe { km.krealloc(p, l, 100, false) };
    assert_eq!(
        r,
        Err(AllocError::Free(FreeError::RedZoneOverwritten {
            ptr: addr(p),
            offset: 21
        }))
    );
}

/// `test_kfree_rcu`: an object freed with `kfree_rcu` goes back after the
/// grace period with no error from the checks, and the cache is destroyed
/// cleanly once it has.
#[test]
fn test_kfree_rcu() {
    use slub_core::testing::EpochGracePeriod;
    for flags in FRONTS {
        let a = arena();
        let mut c = cache(&a, flags);
        let gp = EpochGracePeriod::new();
        let p = c.alloc().unwrap();
        // SAFETY: a fresh 64-byte object.
        unsafe { p.as_ptr().write_bytes(0x5a, 64) };
        // SAFETY: allocated above, unpublished, freed once.
        unsafe { c.free_deferred(p, &gp) }.unwrap();
        assert_eq!(c.flush_deferred(&gp), 0, "{flags:?}: no reader, freed");
        // Freed through the checked path: a second free of it is caught.
        // SAFETY: a double free on purpose (refused by the checks).
        let r = unsafe { c.free(p) };
        assert_eq!(r, Err(FreeError::DoubleFree { ptr: addr(p) }), "{flags:?}");
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}

/// `test_kfree_rcu_wq_destroy`: `kfree_rcu` and then the cache destroyed
/// from a work item while a reader is still inside: the destroy waits for
/// the grace period (it neither frees under the reader nor reports the
/// pending object as leaked) and then returns every page.
#[test]
fn test_kfree_rcu_wq_destroy() {
    use slub_core::testing::EpochGracePeriod;
    for flags in FRONTS {
        let a = arena();
        let mut c = cache(&a, flags);
        let gp = EpochGracePeriod::new();
        let reader = gp.read();
        let p = c.alloc().unwrap();
        // SAFETY: a fresh 64-byte object.
        unsafe { p.as_ptr().write_bytes(0x5a, 64) };
        // SAFETY: allocated above, unpublished, freed once.
        unsafe { c.free_deferred(p, &gp) }.unwrap();
        let (r, inside) = std::thread::scope(|s| {
            let gp = &gp;
            let wq = s.spawn(move || {
                let r = c.destroy_deferred(gp);
                (r, gp.readers())
            });
            // The reader still sees the object intact.
            // SAFETY: deferred, so not freed while we are inside.
            assert!((0..64).all(|i| unsafe { *p.as_ptr().add(i) } == 0x5a));
            drop(reader);
            wq.join().unwrap()
        });
        assert_eq!(r, Ok(()), "{flags:?}");
        assert_eq!(inside, 0, "{flags:?}: destroyed under a reader");
        assert_eq!(a.frames_in_use(), 0);
    }
}
