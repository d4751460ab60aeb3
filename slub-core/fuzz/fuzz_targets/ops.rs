//! `cargo +nightly fuzz run ops` (from slub-core/): sequences of alloc /
//! free / alloc_bulk / free_bulk / prefill / alloc_nolock / free_nolock (also
//! with the node lock held, so frees are deferred) / shrink / CPU migration over five
//! `KmemCache`s of different sizes, alignments, fronts and tunables, and
//! kmalloc / kfree / krealloc / kmalloc_nolock over a `Kmalloc`, all through
//! the checked API under `debug`. Every object handed out must be aligned,
//! inside the arena and overlap no live object; it is filled with its own
//! pattern, checked when it is freed (or moved by krealloc). Bad frees are
//! mixed in and must be refused with the right error, leaving the object
//! alone: double frees, pointers inside an object, foreign pointers, and
//! red-zone overwrites (reported at the offset written). At the end every
//! object is freed, every cache destroyed and every frame is back.
#![no_main]

use arch_api::{HostedCpus, PhysArena, PhysMap};
use core::alloc::Layout;
use libfuzzer_sys::fuzz_target;
use slub_core::testing::HostedPlatform;
use slub_core::{AllocError, ArenaPages, CacheConfig, CacheFlags, FreeError, Kmalloc, KmemCache};
use std::collections::BTreeMap;
use std::ptr::NonNull;

type K<'a> = HostedPlatform<&'a ArenaPages<'a>, &'a HostedCpus>;

const CPUS: usize = 3;
const ARENA: u64 = 16 << 20;
const KMALLOC: usize = usize::MAX;

/// The fuzzer's bytes as a stream of numbers (zeros once exhausted).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> usize {
        usize::from(self.u8()) | usize::from(self.u8()) << 8
    }
}

/// A live object: its cache (`KMALLOC` for kmalloc), the bytes the model
/// owns, the layout it is freed with (kmalloc) and its fill byte.
#[derive(Clone, Copy, Debug)]
struct Obj {
    cache: usize,
    len: usize,
    layout: Layout,
    fill: u8,
}

/// A fill byte that is none of the debug bytes (poison, red zones), so an
/// object's contents can never pass for allocator metadata.
fn fill_for(seq: u64) -> u8 {
    let mut b = (seq.wrapping_mul(0x9e37_79b9) >> 24) as u8;
    while [0x5a, 0x6b, 0xa5, 0xbb, 0xcc, 0x00].contains(&b) {
        b = b.wrapping_add(1);
    }
    b
}

struct Model {
    live: BTreeMap<usize, Obj>,
    /// Recently freed object addresses per cache (for double frees).
    freed: Vec<(usize, usize)>,
    seq: u64,
    lo: usize,
    hi: usize,
}

impl Model {
    fn add(&mut self, p: NonNull<u8>, cache: usize, len: usize, layout: Layout) {
        let a = p.as_ptr() as usize;
        assert!(
            a % layout.align() == 0,
            "{a:#x} aligned to {}",
            layout.align()
        );
        assert!(a >= self.lo && a + len <= self.hi, "{a:#x} in the arena");
        if let Some((&b, o)) = self.live.range(..=a).next_back() {
            assert!(b + o.len.max(1) <= a, "{a:#x} overlaps live {b:#x} {o:?}");
        }
        if let Some((&b, o)) = self.live.range(a..).next() {
            assert!(
                a + len.max(1) <= b,
                "{a:#x}+{len} overlaps live {b:#x} {o:?}"
            );
        }
        self.seq += 1;
        let fill = fill_for(self.seq);
        // SAFETY: a fresh object of at least `len` bytes.
        unsafe { p.as_ptr().write_bytes(fill, len) };
        self.live.insert(
            a,
            Obj {
                cache,
                len,
                layout,
                fill,
            },
        );
        self.freed.retain(|&(_, f)| f != a);
    }

    /// Checks the object's contents and forgets it (it is being freed).
    fn take(&mut self, a: usize) -> Obj {
        check(a, &self.live[&a]);
        self.forget(a)
    }

    /// Forgets the object (freed already, e.g. moved by krealloc).
    fn forget(&mut self, a: usize) -> Obj {
        let o = self.live.remove(&a).expect("a live object");
        self.freed.push((o.cache, a));
        if self.freed.len() > 64 {
            self.freed.remove(0);
        }
        o
    }

    /// The `i`th live object (modulo), if any.
    fn pick(&self, i: usize, want: impl Fn(&Obj) -> bool) -> Option<(usize, Obj)> {
        let n = self.live.values().filter(|o| want(o)).count();
        if n == 0 {
            return None;
        }
        self.live
            .iter()
            .filter(|(_, o)| want(o))
            .nth(i % n)
            .map(|(&a, &o)| (a, o))
    }

    /// Whether `a` is inside a live object.
    fn covered(&self, a: usize) -> bool {
        self.live
            .range(..=a)
            .next_back()
            .is_some_and(|(&b, o)| a < b + o.len.max(1))
    }
}

fn check(a: usize, o: &Obj) {
    // SAFETY: a live object of at least `len` bytes.
    let bytes = unsafe { core::slice::from_raw_parts(a as *const u8, o.len) };
    if let Some(i) = bytes.iter().position(|&b| b != o.fill) {
        panic!("object {a:#x} {o:?}: byte {i} is {:#x}", bytes[i]);
    }
}

fn caches<'a>(pages: &'a ArenaPages<'a>, cpus: &'a HostedCpus, flip: u8) -> Vec<KmemCache<K<'a>>> {
    let d = CacheConfig::default();
    let specs: [(usize, usize, CacheFlags, CacheConfig); 5] = [
        (
            24,
            8,
            CacheFlags::empty(),
            CacheConfig {
                min_partial: 1,
                ..d
            },
        ),
        (
            200,
            8,
            CacheFlags::SHEAVES,
            CacheConfig {
                sheaf_capacity: 4,
                barn_max_full: 2,
                barn_max_empty: 1,
                ..d
            },
        ),
        (64, 64, CacheFlags::RANDOM_FREELIST, d),
        (
            3000,
            16,
            CacheFlags::SHEAVES | CacheFlags::RANDOM_FREELIST,
            CacheConfig {
                max_objects: 3,
                sheaf_capacity: 2,
                ..d
            },
        ),
        (
            8,
            8,
            CacheFlags::empty(),
            CacheConfig {
                max_objects: 4,
                cpu_partial: 1,
                min_partial: 0,
                ..d
            },
        ),
    ];
    specs
        .iter()
        .enumerate()
        .map(|(i, &(size, align, flags, config))| {
            // The input's first byte switches fronts per cache.
            let flags = if flip >> i & 1 != 0 {
                flags ^ CacheFlags::SHEAVES
            } else {
                flags
            };
            KmemCache::with_config("fuzz", size, align, flags, pages, cpus, config).unwrap()
        })
        .collect()
}

fn kmalloc_layout(b: &mut Bytes<'_>) -> Layout {
    let s = b.u16();
    let size = match s & 3 {
        0 => s >> 2 & 63,
        1 => s >> 2 & 1023,
        2 => s >> 2 & 16383,
        _ => (s >> 2) * 5,
    };
    let align = 8usize << (b.u8() % 8);
    Layout::from_size_align(size, align).unwrap()
}

fn run(b: &mut Bytes<'_>) {
    HostedCpus::run_on(0);
    let arena = PhysArena::new(ARENA, 4096).unwrap();
    let pages = ArenaPages::new(&arena);
    let cpus = HostedCpus::new(CPUS);
    let flip = b.u8();
    let mut cs = caches(&pages, &cpus, flip);
    let kflags = if flip & 0x80 != 0 {
        CacheFlags::SHEAVES
    } else {
        CacheFlags::empty()
    };
    let mut km: Kmalloc<K<'_>> = Kmalloc::new(&pages, &cpus, kflags).unwrap();
    let (lo, hi) = {
        let p = arena.phys_to_ptr(PhysArena::BASE) as usize;
        (p, p + ARENA as usize)
    };
    let mut m = Model {
        live: BTreeMap::new(),
        freed: Vec::new(),
        seq: 0,
        lo,
        hi,
    };
    let nc = cs.len();
    let lay = |c: &KmemCache<K<'_>>| Layout::from_size_align(c.object_size(), 8).unwrap();
    let is_cache = |want: usize| move |o: &Obj| o.cache == want;

    let mut ops = 0;
    while !b.0.is_empty() && ops < 2000 {
        ops += 1;
        let op = b.u8();
        let c = usize::from(op >> 5) % nc;
        let cache = &cs[c];
        match op & 31 {
            0..=3 => match cache.alloc() {
                Ok(p) => m.add(p, c, cache.object_size(), lay(cache)),
                Err(AllocError::OutOfMemory) => {}
                Err(e) => panic!("alloc: {e}"),
            },
            4..=6 => {
                if let Some((a, _)) = m.pick(b.u16(), is_cache(c)) {
                    m.take(a);
                    // SAFETY: a live object of this cache, freed once.
                    unsafe { cache.free(NonNull::new(a as *mut u8).unwrap()) }.unwrap();
                }
            }
            7 => {
                let n = usize::from(b.u8() % 48);
                let mut out = vec![NonNull::dangling(); n];
                match cache.alloc_bulk(&mut out) {
                    Ok(()) => {
                        for p in out {
                            m.add(p, c, cache.object_size(), lay(cache));
                        }
                    }
                    Err(AllocError::OutOfMemory) => {}
                    Err(e) => panic!("alloc_bulk: {e}"),
                }
            }
            8 => {
                let n = usize::from(b.u8() % 48);
                let start = b.u16();
                let mut objs = Vec::new();
                for i in 0..n {
                    if let Some((a, _)) = m.pick(start + i * 7, is_cache(c)) {
                        m.take(a);
                        objs.push(NonNull::new(a as *mut u8).unwrap());
                    }
                }
                // SAFETY: live objects of this cache, each freed once.
                unsafe { cache.free_bulk(&objs) }.unwrap();
            }
            9 | 10 => match cache.alloc_nolock() {
                Ok(p) => m.add(p, c, cache.object_size(), lay(cache)),
                Err(AllocError::WouldBlock) => {}
                Err(e) => panic!("alloc_nolock: {e}"),
            },
            11 | 12 => {
                if let Some((a, _)) = m.pick(b.u16(), is_cache(c)) {
                    m.take(a);
                    // SAFETY: a live object of this cache, freed once.
                    unsafe { cache.free_nolock(NonNull::new(a as *mut u8).unwrap()) }.unwrap();
                }
            }
            // An "interrupt" inside a slow path: nolock calls with the node
            // lock held (frees that need it are deferred).
            13 => {
                let victim = m.pick(b.u16(), is_cache(c));
                if let Some((a, _)) = victim {
                    m.take(a);
                }
                let want_alloc = b.u8() & 1 != 0;
                let (got, freed) = cache.with_node_lock_held(|| {
                    let got = want_alloc.then(|| cache.alloc_nolock());
                    // SAFETY: a live object of this cache, freed once.
                    let freed = victim.map(|(a, _)| unsafe {
                        cache.free_nolock(NonNull::new(a as *mut u8).unwrap())
                    });
                    (got, freed)
                });
                match got {
                    Some(Ok(p)) => m.add(p, c, cache.object_size(), lay(cache)),
                    None | Some(Err(AllocError::WouldBlock)) => {}
                    Some(Err(e)) => panic!("alloc_nolock under the node lock: {e}"),
                }
                if let Some(r) = freed {
                    r.unwrap();
                }
            }
            14 => {
                cache.shrink();
            }
            15 => HostedCpus::run_on(usize::from(b.u8()) % CPUS),
            16..=18 => {
                let l = kmalloc_layout(b);
                match km.alloc(l) {
                    Ok(p) => m.add(p, KMALLOC, l.size(), l),
                    Err(AllocError::OutOfMemory) => {}
                    Err(e) => panic!("kmalloc {l:?}: {e}"),
                }
            }
            19 => {
                let l = kmalloc_layout(b);
                match km.alloc_nolock(l) {
                    Ok(p) => m.add(p, KMALLOC, l.size(), l),
                    Err(AllocError::WouldBlock) => {}
                    Err(e) => panic!("kmalloc_nolock {l:?}: {e}"),
                }
            }
            20..=22 => {
                if let Some((a, o)) = m.pick(b.u16(), is_cache(KMALLOC)) {
                    m.take(a);
                    let p = NonNull::new(a as *mut u8).unwrap();
                    // A class object may go back through kfree_nolock.
                    if op & 31 == 22 && o.layout.size().max(o.layout.align()) <= 16384 {
                        // SAFETY: live, allocated with this layout, freed once.
                        unsafe { km.free_nolock(p, o.layout) }.unwrap();
                    } else {
                        // SAFETY: live, allocated with this layout, freed once.
                        unsafe { km.free(p, o.layout) }.unwrap();
                    }
                }
            }
            23 | 24 => {
                let Some((a, o)) = m.pick(b.u16(), is_cache(KMALLOC)) else {
                    continue;
                };
                let new = kmalloc_layout(b).size();
                let zero = b.u8() & 1 != 0;
                let p = NonNull::new(a as *mut u8).unwrap();
                check(a, &o);
                // SAFETY: live, allocated with `o.layout`.
                match unsafe { km.krealloc(p, o.layout, new, zero) } {
                    Ok(q) => {
                        // Moved (the old object is freed) or kept.
                        m.forget(a);
                        // The kept bytes moved (or stayed) intact; what it
                        // grew into is zero with `zero`.
                        let kept = o.len.min(new);
                        // SAFETY: `q` holds `new` bytes.
                        let got = unsafe { core::slice::from_raw_parts(q.as_ptr(), new) };
                        assert!(got[..kept].iter().all(|&x| x == o.fill), "kept bytes");
                        if zero {
                            assert!(got[kept..].iter().all(|&x| x == 0), "zeroed bytes");
                        }
                        let l = Layout::from_size_align(new, o.layout.align()).unwrap();
                        m.add(q, KMALLOC, new, l);
                    }
                    Err(AllocError::OutOfMemory) => check(a, &o),
                    Err(e) => panic!("krealloc {o:?} -> {new}: {e}"),
                }
            }
            // Bad frees: refused, the object (if any) left alone.
            25 => {
                // A double free of an object freed before and not handed
                // out again (possibly in a slab given back since).
                let i = b.u16();
                if m.freed.is_empty() {
                    continue;
                }
                let (fc, a) = m.freed[i % m.freed.len()];
                if fc == KMALLOC || m.covered(a) {
                    continue;
                }
                let p = NonNull::new(a as *mut u8).unwrap();
                // SAFETY: under `debug` with the arena's direct map, any
                // pointer is checked before it is used.
                let r = unsafe { cs[fc].free(p) };
                assert!(
                    matches!(
                        r,
                        Err(FreeError::DoubleFree { .. } | FreeError::ForeignPointer { .. })
                    ),
                    "double free of {a:#x} in cache {fc}: {r:?}"
                );
            }
            26 => {
                // A pointer inside a live object.
                let Some((a, o)) = m.pick(b.u16(), |o| o.cache != KMALLOC) else {
                    continue;
                };
                let slot = cs[o.cache].slot_size();
                let off = 1 + b.u16() % (slot - 1);
                let p = NonNull::new((a + off) as *mut u8).unwrap();
                // SAFETY: as above: checked before use under `debug`.
                let r = unsafe { cs[o.cache].free(p) };
                assert_eq!(r, Err(FreeError::Misaligned { ptr: a + off }));
                check(a, &o);
            }
            27 => {
                // A foreign pointer (host memory outside the arena).
                let host = vec![0u8; 64];
                let p = NonNull::new(host.as_ptr() as *mut u8).unwrap();
                // SAFETY: as above: checked before use under `debug`.
                let r = unsafe { cache.free(p) };
                assert_eq!(
                    r,
                    Err(FreeError::ForeignPointer {
                        ptr: p.as_ptr() as usize
                    })
                );
                // SAFETY: as above.
                let r = unsafe { cache.free_nolock(p) };
                assert!(r.is_err(), "free_nolock of a foreign pointer: {r:?}");
            }
            28 | 29 => {
                // A write past the size asked for (into the red zone, or
                // the rest of a kmalloc object), found on free at that
                // offset; the object stays allocated; repaired, it frees.
                let Some((a, o)) = m.pick(b.u16(), |o| {
                    o.cache != KMALLOC || o.layout.size().max(o.layout.align()) <= 16384
                }) else {
                    continue;
                };
                let class = if o.cache == KMALLOC {
                    &km.caches()
                        [slub_core::kmalloc_index(o.layout.size(), o.layout.align()).unwrap()]
                } else {
                    &cs[o.cache]
                };
                let size = class.object_size();
                // Up to the end of the red zone after the object (8 bytes
                // past the size rounded to 8).
                let room = size.next_multiple_of(8) + 8 - o.len;
                let off = o.len + b.u16() % room;
                let at = (a + off) as *mut u8;
                // SAFETY: inside the object's slot (object and red zone).
                let old = unsafe { at.read() };
                // SAFETY: as above.
                unsafe { at.write(old ^ 0x11) };
                let p = NonNull::new(a as *mut u8).unwrap();
                // SAFETY: live; the free is refused (checked below).
                let r = if o.cache == KMALLOC {
                    unsafe { km.free(p, o.layout) }
                } else if op & 1 == 0 {
                    unsafe { class.free(p) }
                } else {
                    unsafe { class.free_nolock(p) }
                };
                assert_eq!(
                    r,
                    Err(FreeError::RedZoneOverwritten {
                        ptr: a,
                        offset: off as u32
                    }),
                    "{o:?} size {size} written at {off}"
                );
                // SAFETY: as above.
                unsafe { at.write(old) };
                check(a, &o);
            }
            30 => {
                // A prefilled reservation: `n` objects ahead, `k` drawn
                // (each cannot fail), a refill, the rest given back.
                let n = usize::from(b.u8() % 40);
                let k = usize::from(b.u8());
                let more = usize::from(b.u8() % 8);
                let mut r = match cache.prefill(n) {
                    Ok(r) => r,
                    Err(AllocError::OutOfMemory) => continue,
                    Err(e) => panic!("prefill {n}: {e}"),
                };
                assert_eq!(r.len(), n);
                for _ in 0..k % (n + 1) {
                    let p = r.alloc().expect("a prefilled object");
                    m.add(p, c, cache.object_size(), lay(cache));
                }
                let want = r.len() + more;
                match r.refill(want) {
                    Ok(()) => assert_eq!(r.len(), want, "refilled"),
                    Err(AllocError::OutOfMemory) => {}
                    Err(AllocError::BadLayout) if want > r.capacity() => {}
                    Err(e) => panic!("refill {want} of {}: {e}", r.capacity()),
                }
                if k & 1 != 0 {
                    while let Some(p) = r.alloc() {
                        m.add(p, c, cache.object_size(), lay(cache));
                    }
                }
                r.give_back().unwrap();
            }
            _ => {
                // Every live object intact.
                for (&a, o) in &m.live {
                    check(a, o);
                }
            }
        }
    }

    // Free everything (checking it), destroy, and every frame is back.
    for (a, o) in std::mem::take(&mut m.live) {
        check(a, &o);
        let p = NonNull::new(a as *mut u8).unwrap();
        if o.cache == KMALLOC {
            // SAFETY: live, allocated with this layout, freed once.
            unsafe { km.free(p, o.layout) }.unwrap();
        } else {
            // SAFETY: live, freed once.
            unsafe { cs[o.cache].free(p) }.unwrap();
        }
    }
    for c in &mut cs {
        c.destroy().unwrap();
    }
    km.destroy().unwrap();
    assert_eq!(km.large_bytes(), 0);
    drop(cs);
    drop(km);
    assert_eq!(arena.frames_in_use(), 0, "every frame is back");
}

fuzz_target!(|data: &[u8]| {
    run(&mut Bytes(data));
});
