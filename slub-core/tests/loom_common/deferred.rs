//! (5) Deferred frees: the hand-over from a CPU's batch to the pending
//! ring and the free after the grace period, against a reader that found
//! the object before it was unpublished.

use super::*;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use slub_core::{CacheFlags, GracePeriod};
use std::ptr::NonNull;

const MARK: u64 = 0x5a5a_5a5a_5a5a_5a5a;

/// A grace period from loom primitives: the epoch new readers join and
/// the epochs of the readers inside; a cookie has elapsed once no reader
/// of its epoch or an earlier one is inside. It cannot wait.
pub struct LoomGp {
    state: loom::sync::Mutex<(u64, Vec<u64>)>,
}

impl LoomGp {
    pub fn new() -> Self {
        Self {
            state: loom::sync::Mutex::new((1, Vec::new())),
        }
    }

    /// Enters; returns the epoch to leave with.
    pub fn enter(&self) -> u64 {
        let mut s = self.state.lock().unwrap();
        let e = s.0;
        s.1.push(e);
        e
    }

    pub fn leave(&self, e: u64) {
        let mut s = self.state.lock().unwrap();
        let i = s.1.iter().position(|&x| x == e).unwrap();
        s.1.swap_remove(i);
    }
}

impl GracePeriod for LoomGp {
    fn start(&self) -> u64 {
        let mut s = self.state.lock().unwrap();
        let c = s.0;
        s.0 += 1;
        c
    }
    fn elapsed(&self, cookie: u64) -> bool {
        self.state.lock().unwrap().1.iter().all(|&e| e > cookie)
    }
}

/// One object published to a reader; the writer unpublishes it, defers
/// its free (a batch of one: handed over at once), polls, and allocates
/// again (the freed object would come back first). The reader, if it found
/// the object, must see it intact for as long as it is inside.
pub fn deferred_free() {
    loom::model(|| {
        let cpus = LoomCpus::new(1, &[0, 0]);
        cpus.bind(0);
        let c = Arc::new(cache::<slub_core::DefaultDwCas>(
            cpus,
            2,
            CacheFlags::empty(),
        ));
        let gp = Arc::new(LoomGp::new());
        let obj = c.alloc().unwrap().as_ptr().cast::<u64>();
        for i in 0..4 {
            // SAFETY: a fresh 32-byte object.
            unsafe { obj.add(i).write(MARK) };
        }
        let published = Arc::new(AtomicUsize::new(obj as usize));
        let reader = {
            let (gp, published) = (gp.clone(), published.clone());
            loom::thread::spawn(move || {
                let e = gp.enter();
                let p = published.load(Ordering::Acquire) as *const u64;
                if !p.is_null() {
                    loom::thread::yield_now();
                    for i in 0..4 {
                        // SAFETY: found while inside: not freed until we
                        // leave (what the model checks).
                        let w = unsafe { p.add(i).read_volatile() };
                        assert_eq!(w, MARK, "freed under a reader");
                    }
                }
                gp.leave(e);
            })
        };
        published.store(0, Ordering::Release);
        // SAFETY: allocated above, unpublished, freed once.
        unsafe { c.free_deferred(NonNull::new(obj.cast()).unwrap(), &*gp) }.unwrap();
        c.poll_deferred(&*gp);
        let q = c.alloc().unwrap();
        // SAFETY: a fresh 32-byte object.
        unsafe { q.as_ptr().write_bytes(0, 32) };
        reader.join().unwrap();
        // SAFETY: allocated above, freed once.
        unsafe { c.free(q) }.unwrap();
        let mut c = match Arc::try_unwrap(c) {
            Ok(c) => c,
            Err(_) => panic!("cache still shared"),
        };
        c.destroy_deferred(&*gp)
            .expect("every deferred free done once the reader left");
        assert_eq!(c.mem().blocks_in_use(), 0, "every page returned");
    });
}

/// `flush_deferred` on CPU 0 hands over CPU 1's partial batch while a task
/// on CPU 1 adds to that batch. The batch (capacity 4) already holds one
/// object; every object must be freed exactly once by the time the cache is
/// destroyed, none lost in a batch taken from under its owner.
pub fn flush_while_adding() {
    loom::model(|| {
        let cpus = LoomCpus::new(2, &[0, 1]);
        cpus.bind(1);
        let c: Cache<slub_core::DefaultDwCas> = KmemCache::with_config(
            "loom",
            32,
            8,
            CacheFlags::empty(),
            slub_core::SystemPages::new(),
            cpus,
            slub_core::CacheConfig {
                max_objects: 4,
                min_partial: 0,
                cpu_partial: 0,
                sheaf_capacity: 4,
                barn_max_full: 4,
                barn_max_empty: 4,
                seed: 1,
                new_slab: None,
                fast_path_stats: true,
            },
        )
        .unwrap();
        let c = Arc::new(c);
        let gp = Arc::new(LoomGp::new());
        let first = c.alloc().unwrap();
        let second = c.alloc().unwrap().as_ptr() as usize;
        // SAFETY: allocated above, never published, freed once.
        unsafe { c.free_deferred(first, &*gp) }.unwrap();
        let owner = {
            let (c, gp) = (c.clone(), gp.clone());
            loom::thread::spawn(move || {
                c.cpus().bind(1);
                let p = NonNull::new(second as *mut u8).unwrap();
                // SAFETY: allocated above, never published, freed once.
                unsafe { c.free_deferred(p, &*gp) }.unwrap();
            })
        };
        let flusher = {
            let (c, gp) = (c.clone(), gp.clone());
            loom::thread::spawn(move || {
                c.cpus().bind(0);
                c.flush_deferred(&*gp)
            })
        };
        owner.join().unwrap();
        let left = flusher.join().unwrap();
        assert!(left <= 2, "broken flush: {left} pending of 2");
        let mut c = match Arc::try_unwrap(c) {
            Ok(c) => c,
            Err(_) => panic!("cache still shared"),
        };
        c.destroy_deferred(&*gp)
            .expect("broken flush: a deferred free lost");
        assert_eq!(c.mem().blocks_in_use(), 0, "every page returned");
    });
}
