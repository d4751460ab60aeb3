//! KmemCache behaviour through the public API: allocation, frees from every
//! path, typed errors, shrink and destroy accounting, hardening.
#![cfg(not(kmm_loom))]

use arch_api::PhysArena;
use slub_core::testing::HostedPlatform;
use slub_core::{
    AllocError, ArenaPages, CacheConfig, CacheFlags, DestroyError, FreeError, KmemCache,
    SystemPages, ThreadCpus,
};
use std::collections::HashSet;
use std::ptr::NonNull;

type Cache<'a> = KmemCache<HostedPlatform<ArenaPages<'a>, ThreadCpus>>;

fn arena() -> PhysArena {
    PhysArena::new(64 << 20, 4096).unwrap()
}

fn scale(n: usize) -> usize {
    if cfg!(miri) { n.min(200) } else { n }
}

#[test]
fn objects_are_distinct_aligned_writable_and_all_pages_return() {
    for (size, align) in [
        (8, 8),
        (24, 8),
        (64, 64),
        (100, 16),
        (256, 256),
        (4000, 8),
        (16384, 16384),
    ] {
        // A fresh arena per cache: miri's weak-memory emulation ICEs when a
        // page that held atomics (a per-CPU array) is reused for objects.
        let a = arena();
        let mut c: Cache = KmemCache::new(
            "t",
            size,
            align,
            CacheFlags::empty(),
            ArenaPages::new(&a),
            ThreadCpus,
        )
        .unwrap();
        let n = scale(3 * c.objects_per_slab() + 5);
        let mut seen = HashSet::new();
        let mut objs = Vec::new();
        for i in 0..n {
            let p = c.alloc().unwrap();
            assert_eq!(p.as_ptr() as usize % align, 0, "size {size} align {align}");
            assert!(seen.insert(p.as_ptr() as usize), "object handed out twice");
            // SAFETY: a fresh object of `size` bytes.
            unsafe { p.as_ptr().write_bytes(i as u8, size) };
            objs.push(p);
        }
        for (i, p) in objs.iter().enumerate() {
            // SAFETY: still allocated.
            assert_eq!(unsafe { *p.as_ptr().add(size - 1) }, i as u8, "no overlap");
        }
        for p in objs {
            // SAFETY: allocated above, freed once.
            unsafe { c.free(p) }.unwrap();
        }
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0, "size {size}: every page returned");
    }
}

#[test]
fn destroy_with_live_objects_names_them_and_frees_nothing() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let mut c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> =
        KmemCache::new("live", 64, 8, CacheFlags::empty(), &pages, ThreadCpus).unwrap();
    let objs: Vec<_> = (0..scale(300)).map(|_| c.alloc().unwrap()).collect();
    let keep = &objs[..7];
    for p in &objs[7..] {
        // SAFETY: allocated, freed once.
        unsafe { c.free(*p) }.unwrap();
    }
    let before = a.frames_in_use();
    assert_eq!(c.destroy(), Err(DestroyError::LiveObjects { remaining: 7 }));
    assert!(
        a.frames_in_use() > 0 && a.frames_in_use() <= before,
        "live slabs kept"
    );
    for p in keep {
        // SAFETY: the live objects are still valid memory and still usable.
        unsafe { p.as_ptr().write_bytes(0x11, 64) };
    }
    // Still usable after the refusal.
    let p = c.alloc().unwrap();
    // SAFETY: allocated just above.
    unsafe { c.free(p) }.unwrap();
    for p in keep {
        // SAFETY: allocated, freed once.
        unsafe { c.free(*p) }.unwrap();
    }
    c.destroy().unwrap();
    assert_eq!(a.frames_in_use(), 0);
    assert_eq!(c.destroy(), Err(DestroyError::AlreadyDestroyed));
    assert_eq!(c.alloc(), Err(AllocError::Destroyed));
}

#[test]
fn shrink_returns_empty_slabs() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> =
        KmemCache::new("shrink", 512, 8, CacheFlags::empty(), &pages, ThreadCpus).unwrap();
    // Enough objects for more slabs than min_partial, whatever the geometry
    // (slab order depends on the CPU count), even under miri.
    let min_partial = CacheConfig::default().min_partial;
    let n = scale(2000).max((min_partial + 3) * c.objects_per_slab());
    let objs: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
    let held = c.nr_slabs();
    assert!(held > min_partial);
    for p in objs {
        // SAFETY: allocated, freed once.
        unsafe { c.free(p) }.unwrap();
    }
    // Up to min_partial empty slabs stay cached until a shrink, and so do
    // the slabs on the CPU's partial list (frees froze them there, as in
    // Linux, without the node lock) and the CPU slab.
    let d = CacheConfig::default();
    assert!(c.nr_slabs() <= d.min_partial + d.cpu_partial + 2);
    c.shrink();
    assert_eq!(c.nr_slabs(), 0);
    let info = c.slabinfo();
    assert_eq!((info.num_slabs, info.active_objs), (0, 0));
}

#[test]
fn remote_frees_from_other_threads_come_back() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let mut c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> =
        KmemCache::new("remote", 128, 8, CacheFlags::empty(), &pages, ThreadCpus).unwrap();
    let rounds = if cfg!(miri) { 2 } else { 50 };
    let per = scale(500);
    for _ in 0..rounds {
        let objs: Vec<usize> = (0..per)
            .map(|_| c.alloc().unwrap().as_ptr() as usize)
            .collect();
        std::thread::scope(|s| {
            for chunk in objs.chunks(per / 4 + 1) {
                let c = &c;
                s.spawn(move || {
                    for &p in chunk {
                        // SAFETY: allocated by the main thread, freed once here.
                        unsafe { c.free(NonNull::new(p as *mut u8).unwrap()) }.unwrap();
                    }
                });
            }
        });
    }
    c.destroy().unwrap();
    assert_eq!(a.frames_in_use(), 0);
}

#[test]
fn bad_frees_are_typed_errors() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let mut c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> =
        KmemCache::new("bad", 48, 8, CacheFlags::empty(), &pages, ThreadCpus).unwrap();
    let p = c.alloc().unwrap();
    let q = c.alloc().unwrap();
    let mis = NonNull::new(p.as_ptr().wrapping_add(8)).unwrap();
    // SAFETY: a pointer inside our slab; refused before any free happens.
    let r = unsafe { c.free(mis) };
    assert_eq!(
        r,
        Err(FreeError::Misaligned {
            ptr: mis.as_ptr() as usize
        })
    );
    // SAFETY: allocated, freed once.
    unsafe { c.free(p) }.unwrap();
    // SAFETY: double free: detected at the head of the CPU freelist.
    let r = unsafe { c.free(p) };
    assert_eq!(
        r,
        Err(FreeError::DoubleFree {
            ptr: p.as_ptr() as usize
        })
    );
    // SAFETY: allocated, freed once.
    unsafe { c.free(q) }.unwrap();
    c.destroy().unwrap();
    assert_eq!(a.frames_in_use(), 0);
}

#[test]
fn double_free_on_the_slab_path_is_detected() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> = KmemCache::with_config(
        "df",
        64,
        8,
        CacheFlags::empty(),
        &pages,
        ThreadCpus,
        CacheConfig {
            max_objects: 4,
            ..Default::default()
        },
    )
    .unwrap();
    // Fill two slabs so the first is no longer the CPU slab.
    let objs: Vec<_> = (0..8).map(|_| c.alloc().unwrap()).collect();
    // SAFETY: allocated, freed once.
    unsafe { c.free(objs[0]) }.unwrap();
    // SAFETY: deliberately a double free; objs[0] heads its slab's freelist.
    let r = unsafe { c.free(objs[0]) };
    assert_eq!(
        r,
        Err(FreeError::DoubleFree {
            ptr: objs[0].as_ptr() as usize
        })
    );
    for p in &objs[1..] {
        // SAFETY: allocated, freed once.
        unsafe { c.free(*p) }.unwrap();
    }
}

#[test]
fn corrupted_freelist_pointer_is_reported_not_followed() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> =
        KmemCache::new("corrupt", 64, 8, CacheFlags::empty(), &pages, ThreadCpus).unwrap();
    let p = c.alloc().unwrap();
    let q = c.alloc().unwrap();
    // SAFETY: allocated, freed once.
    unsafe { c.free(q) }.unwrap();
    // SAFETY: allocated, freed once.
    unsafe { c.free(p) }.unwrap();
    // Use after free: overwrite p's stored next pointer with a plausible
    // raw pointer (it is obfuscated, so this decodes to garbage).
    let fp_off = if cfg!(feature = "debug") { 64 + 8 } else { 0 };
    // SAFETY: p's memory is still slab memory we may write for this test.
    unsafe { (p.as_ptr().add(fp_off) as *mut usize).write(q.as_ptr() as usize) };
    match c.alloc() {
        Err(AllocError::FreelistCorrupted { object, .. }) => {
            assert_eq!(object, p.as_ptr() as usize)
        }
        other => panic!("corruption not detected: {other:?}"),
    }
}

#[test]
fn stored_freelist_pointers_are_obfuscated() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> =
        KmemCache::new("obf", 64, 8, CacheFlags::empty(), &pages, ThreadCpus).unwrap();
    let p = c.alloc().unwrap();
    let q = c.alloc().unwrap();
    // SAFETY: allocated, freed once.
    unsafe { c.free(q) }.unwrap();
    // SAFETY: allocated, freed once.
    unsafe { c.free(p) }.unwrap();
    let fp_off = if cfg!(feature = "debug") { 64 + 8 } else { 0 };
    // SAFETY: reading slab memory of a free object.
    let stored = unsafe { (p.as_ptr().add(fp_off) as *const usize).read() };
    assert_ne!(
        stored,
        q.as_ptr() as usize,
        "next pointer is not stored in clear"
    );
    assert_eq!(c.alloc().unwrap(), p);
    assert_eq!(c.alloc().unwrap(), q, "decoded on use");
}

#[test]
fn random_freelists_differ_from_address_order() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> = KmemCache::with_config(
        "rand",
        64,
        8,
        CacheFlags::RANDOM_FREELIST,
        &pages,
        ThreadCpus,
        CacheConfig {
            seed: 42,
            ..Default::default()
        },
    )
    .unwrap();
    let n = c.objects_per_slab();
    let objs: Vec<usize> = (0..n)
        .map(|_| c.alloc().unwrap().as_ptr() as usize)
        .collect();
    let mut sorted = objs.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), n, "every object once");
    assert_ne!(objs, sorted, "not in address order");
    for p in objs {
        // SAFETY: allocated, freed once.
        unsafe { c.free(NonNull::new(p as *mut u8).unwrap()) }.unwrap();
    }
}

#[test]
fn bad_cache_parameters_are_errors() {
    let pages = SystemPages::new();
    type C<'a> = KmemCache<HostedPlatform<&'a SystemPages, ThreadCpus>>;
    assert_eq!(
        C::new("z", 0, 8, CacheFlags::empty(), &pages, ThreadCpus).err(),
        Some(slub_core::CacheError::BadSize)
    );
    assert_eq!(
        C::new("a", 8, 3, CacheFlags::empty(), &pages, ThreadCpus).err(),
        Some(slub_core::CacheError::BadAlign)
    );
    assert_eq!(
        C::new("h", 1 << 30, 8, CacheFlags::empty(), &pages, ThreadCpus).err(),
        Some(slub_core::CacheError::BadSize)
    );
}

#[test]
fn out_of_memory_is_an_error() {
    let a = PhysArena::new(64 << 10, 4096).unwrap();
    let pages = ArenaPages::new(&a);
    let mut c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> =
        KmemCache::new("oom", 4096, 4096, CacheFlags::empty(), &pages, ThreadCpus).unwrap();
    let mut objs = Vec::new();
    loop {
        match c.alloc() {
            Ok(p) => objs.push(p),
            Err(e) => {
                assert_eq!(e, AllocError::OutOfMemory);
                break;
            }
        }
        assert!(objs.len() < 1000);
    }
    for p in objs {
        // SAFETY: allocated, freed once.
        unsafe { c.free(p) }.unwrap();
    }
    c.destroy().unwrap();
    assert_eq!(a.frames_in_use(), 0);
}

#[test]
fn slabinfo_line_looks_like_linux() {
    let pages = SystemPages::new();
    let c: KmemCache<HostedPlatform<&SystemPages, ThreadCpus>> = KmemCache::new(
        "kmalloc-256",
        256,
        256,
        CacheFlags::empty(),
        &pages,
        ThreadCpus,
    )
    .unwrap();
    let objs: Vec<_> = (0..40).map(|_| c.alloc().unwrap()).collect();
    let info = c.slabinfo();
    assert!(info.active_objs >= 40 && info.num_objs >= info.active_objs);
    let line = info.to_string();
    assert!(line.starts_with("kmalloc-256"), "{line}");
    assert!(
        line.contains(": tunables") && line.contains(": slabdata"),
        "{line}"
    );
    for p in objs {
        // SAFETY: allocated, freed once.
        unsafe { c.free(p) }.unwrap();
    }
}

#[cfg(feature = "debug")]
#[test]
fn debug_red_zones_poison_and_ownership() {
    use slub_core::hardening::{POISON_END, POISON_FREE};
    let a = arena();
    let pages = ArenaPages::new(&a);
    let c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> =
        KmemCache::new("dbg", 40, 8, CacheFlags::empty(), &pages, ThreadCpus).unwrap();
    let p = c.alloc().unwrap();
    // SAFETY: 40 bytes are ours; a fresh object carries the free poison.
    unsafe {
        assert_eq!(*p.as_ptr(), POISON_FREE);
        assert_eq!(*p.as_ptr().add(39), POISON_END);
        // Overflow by one byte into the red zone.
        *p.as_ptr().add(40) = 0;
    }
    // SAFETY: refused before anything is freed.
    let r = unsafe { c.free(p) };
    assert_eq!(
        r,
        Err(FreeError::RedZoneOverwritten {
            ptr: p.as_ptr() as usize,
            offset: 40
        })
    );
    let q = c.alloc().unwrap();
    // SAFETY: allocated, freed once.
    unsafe { c.free(q) }.unwrap();
    // SAFETY: deliberate double free, detected by the inactive red zone.
    let r = unsafe { c.free(q) };
    assert_eq!(
        r,
        Err(FreeError::DoubleFree {
            ptr: q.as_ptr() as usize
        })
    );
    // Use after free: write into a free object, the next alloc of it reports it.
    // SAFETY: slab memory; a deliberate use after free.
    unsafe { *q.as_ptr().add(3) = 1 };
    assert_eq!(
        c.alloc(),
        Err(AllocError::PoisonOverwritten {
            object: q.as_ptr() as usize,
            offset: 3
        })
    );
    // A foreign pointer (not in the arena) is refused without being read.
    let mut local = [0u64; 8];
    let f = NonNull::new(local.as_mut_ptr().cast::<u8>()).unwrap();
    // SAFETY: refused by the ownership check.
    let r = unsafe { c.free(f) };
    assert_eq!(
        r,
        Err(FreeError::ForeignPointer {
            ptr: f.as_ptr() as usize
        })
    );
}

/// Slabs the hook saw: (first byte, bytes, object size).
static HOOKED: std::sync::Mutex<Vec<(usize, usize, usize)>> = std::sync::Mutex::new(Vec::new());

fn hook(slab: NonNull<u8>, bytes: usize, object_size: usize) {
    HOOKED
        .lock()
        .unwrap()
        .push((slab.as_ptr() as usize, bytes, object_size));
}

#[test]
fn the_new_slab_hook_sees_every_slab_before_its_objects() {
    for flags in [CacheFlags::empty(), CacheFlags::SHEAVES] {
        HOOKED.lock().unwrap().clear();
        let a = arena();
        let pages = ArenaPages::new(&a);
        let mut c: KmemCache<HostedPlatform<&ArenaPages, ThreadCpus>> = KmemCache::with_config(
            "hook",
            96,
            8,
            flags,
            &pages,
            ThreadCpus,
            CacheConfig {
                new_slab: Some(slub_core::NewSlabHook(hook)),
                ..Default::default()
            },
        )
        .unwrap();
        let objs: Vec<_> = (0..scale(500)).map(|_| c.alloc().unwrap()).collect();
        let seen = HOOKED.lock().unwrap().clone();
        assert_eq!(seen.len(), c.slabinfo().num_slabs, "{flags:?}");
        for &(base, bytes, size) in &seen {
            assert_eq!(size, 96);
            assert_eq!(bytes, c.slab_bytes());
            assert_eq!(base % bytes, 0, "a slab aligned to its size");
        }
        for p in &objs {
            let a = p.as_ptr() as usize;
            assert!(
                seen.iter().any(|&(b, n, _)| (b..b + n).contains(&a)),
                "{a:#x} handed out from a slab the hook did not see ({flags:?})"
            );
        }
        for p in objs {
            // SAFETY: allocated above, freed once.
            unsafe { c.free(p) }.unwrap();
        }
        c.destroy().unwrap();
    }
}
