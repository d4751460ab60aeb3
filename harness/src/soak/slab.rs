//! The soak's kmalloc component: two `Kmalloc`s (the tid front and the
//! sheaves front) over one frame arena, shared by every thread, with the
//! threads running as tasks on simulated CPU slots that migrate at random
//! between reading the tid and the CAS. Every object is stamped on kmalloc
//! and checked on kfree (an object handed out twice, or written by the
//! allocator while live, shows); a quarter of the frees are done by another
//! thread. One allocation in eight is `kmalloc_nolock` (falling back to
//! `kmalloc` when it would block), one free in eight `kfree_nolock`, and
//! some objects are `krealloc`ed (stamps moved along). Objects are also
//! published to readers in short read-side sections and freed deferred
//! (`kfree_rcu`), and allocated and freed in bulk (`slab_rcu.rs`). At the
//! end every object is freed, every deferred free waited for, both
//! allocators destroyed, and every slab page must be back in the arena.

use super::{Rng, Tally};
use arch_api::PhysArena;
use slub_core::testing::{EpochGracePeriod, HostedPlatform, ReadGuard};
use slub_core::{ArenaPages, CacheFlags, DestroyError, Kmalloc, MigratingCpus};
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

#[path = "slab_rcu.rs"]
mod rcu;

type SoakKmalloc = Kmalloc<HostedPlatform<&'static ArenaPages<'static>, &'static MigratingCpus>>;

/// Objects one thread holds at most.
const MAX_HELD: usize = 512;

/// A live object and the stamp written into it.
struct Obj {
    ptr: usize,
    size: usize,
    front: usize,
    stamp: u64,
}

/// One thread's state.
pub struct SlabThread {
    t: usize,
    seq: u64,
    held: Vec<Obj>,
    tally: Tally,
    /// Inside a read-side section of the soak's grace period.
    reader: Option<ReadGuard<'static>>,
    /// Steps since the section began.
    inside: u32,
    /// Objects the reader found in the slots.
    seen: Vec<rcu::Seen>,
    /// Unpublished objects whose deferred free was refused inside the
    /// section.
    retry: Vec<Obj>,
}

/// The shared allocators and what the threads leave behind.
pub struct SlabSoak {
    arena: &'static PhysArena,
    cpus: &'static MigratingCpus,
    fronts: [SoakKmalloc; 2],
    inbox: Vec<Mutex<Vec<Obj>>>,
    parked: Mutex<(Vec<Obj>, Tally)>,
    /// The grace periods of every deferred free.
    gp: &'static EpochGracePeriod,
    /// Objects published to readers.
    slots: Vec<Mutex<Option<Obj>>>,
    /// Deferred frees and bulk objects done (the soak's mix, for its test).
    deferred: AtomicU64,
    bulk: AtomicU64,
}

/// Slots of published objects.
const SLOTS: usize = 64;

fn layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size, 8).ok()
}

/// Reads the head stamp of the `size`-byte object `p` and the tail one (the
/// complement of `stamp` below 16 bytes, where there is none).
///
/// # Safety
/// `p` holds `size >= 8` readable bytes.
unsafe fn read_stamp(p: *const u8, size: usize, stamp: u64) -> (u64, u64) {
    // SAFETY: the caller's contract.
    unsafe {
        let tail = if size >= 16 {
            p.add(size - 8).cast::<u64>().read_unaligned()
        } else {
            !stamp
        };
        (p.cast::<u64>().read_unaligned(), tail)
    }
}

/// Writes `stamp` at the start of the `size`-byte object `p` and its
/// complement at the end (from 16 bytes).
///
/// # Safety
/// `p` holds `size >= 8` bytes owned by the caller.
unsafe fn write_stamp(p: *mut u8, size: usize, stamp: u64) {
    // SAFETY: the caller's contract; the stamps do not overlap from 16 bytes.
    unsafe {
        p.cast::<u64>().write_unaligned(stamp);
        if size >= 16 {
            p.add(size - 8).cast::<u64>().write_unaligned(!stamp);
        }
    }
}

impl SlabThread {
    /// Stamps a fresh object with this thread's next sequence number and
    /// holds it.
    ///
    /// # Safety
    /// `p` is a fresh object of `size >= 8` bytes from front `front`.
    unsafe fn stamp_and_hold(&mut self, p: *mut u8, size: usize, front: usize) {
        self.seq += 1;
        let stamp = (self.t as u64) << 48 | self.seq;
        // SAFETY: the caller's contract.
        unsafe { write_stamp(p, size, stamp) };
        self.held.push(Obj {
            ptr: p as usize,
            size,
            front,
            stamp,
        });
    }
}

impl SlabSoak {
    /// A 256 MiB arena; `threads` tasks on `cpus` slots, migrating at one in
    /// 32 fast-path windows.
    pub fn setup(cpus: usize, threads: usize) -> Result<Self, String> {
        let arena: &'static PhysArena = Box::leak(Box::new(
            PhysArena::new(256 << 20, 4096).map_err(|e| e.to_string())?,
        ));
        let pages: &'static ArenaPages<'static> = Box::leak(Box::new(ArenaPages::new(arena)));
        let mc: &'static MigratingCpus = Box::leak(Box::new(MigratingCpus::new(cpus, threads)));
        mc.set_random_migration(32);
        let tid = SoakKmalloc::new(pages, mc, CacheFlags::empty()).map_err(|e| e.to_string())?;
        let sheaves =
            SoakKmalloc::new(pages, mc, CacheFlags::SHEAVES).map_err(|e| e.to_string())?;
        Ok(Self {
            arena,
            cpus: mc,
            fronts: [tid, sheaves],
            inbox: (0..threads).map(|_| Mutex::new(Vec::new())).collect(),
            parked: Mutex::new((Vec::new(), Tally::default())),
            gp: Box::leak(Box::new(EpochGracePeriod::new())),
            slots: (0..SLOTS).map(|_| Mutex::new(None)).collect(),
            deferred: AtomicU64::new(0),
            bulk: AtomicU64::new(0),
        })
    }

    /// Thread `t`'s state; the calling thread becomes task `t`.
    pub fn thread(&self, t: usize) -> SlabThread {
        self.cpus.bind(t);
        SlabThread {
            t,
            seq: 0,
            held: Vec::new(),
            tally: Tally::default(),
            reader: None,
            inside: 0,
            seen: Vec::new(),
            retry: Vec::new(),
        }
    }

    /// Counts a violation if `o` lost its stamps.
    fn check(&self, th: &mut SlabThread, o: &Obj) {
        // SAFETY: `o` is a live object of `o.size` bytes we own; the stamp
        // was written at its start (and end, from 16 bytes) when it was
        // allocated.
        let (head, tail) = unsafe { read_stamp(o.ptr as *const u8, o.size, o.stamp) };
        if head != o.stamp || tail != !o.stamp {
            th.tally.violation(|| {
                format!(
                    "kmalloc-{}: object {:#x} changed while live (stamp {:#x}, found {head:#x}/{:#x})",
                    o.size, o.ptr, o.stamp, !tail
                )
            });
        }
    }

    /// Frees `o` after checking its stamp.
    fn release(&self, th: &mut SlabThread, o: Obj) {
        let Some(l) = layout(o.size) else { return };
        self.check(th, &o);
        let Some(p) = NonNull::new(o.ptr as *mut u8) else {
            return;
        };
        // SAFETY: allocated from this front with this layout, freed once.
        let r = if o.stamp % 8 == 3 && o.size <= slub_core::KMALLOC_MAX_CACHE_SIZE {
            // SAFETY: as above (a class size).
            unsafe { self.fronts[o.front].free_nolock(p, l) }
        } else {
            // SAFETY: as above.
            unsafe { self.fronts[o.front].free(p, l) }
        };
        if let Err(e) = r {
            th.tally
                .violation(|| format!("kfree of {:#x} ({} bytes): {e}", o.ptr, o.size));
        }
    }

    /// One random operation.
    pub fn step(&self, th: &mut SlabThread, rng: &mut Rng) {
        th.tally.ops += 1;
        if rng.one_in(4) {
            let mine =
                std::mem::take(&mut *self.inbox[th.t].lock().unwrap_or_else(|e| e.into_inner()));
            for o in mine {
                self.release(th, o);
            }
        }
        if rng.one_in(3) {
            self.rcu_step(th, rng);
        }
        if rng.one_in(16) {
            self.bulk_alloc(th, rng);
        } else if rng.one_in(16) {
            self.bulk_free(th, rng);
        } else if th.held.len() < MAX_HELD && (th.held.is_empty() || rng.one_in(2)) {
            let size = if rng.one_in(64) {
                // Beyond the largest class: straight from the page source.
                16_385 + rng.below(48 * 1024) as usize
            } else {
                let shift = 3 + rng.below(12) as u32;
                ((1usize << shift) - rng.below(1 << (shift - 1)) as usize).max(8)
            };
            let front = rng.below(2) as usize;
            let Some(l) = layout(size) else { return };
            let got = if rng.one_in(8) {
                self.fronts[front]
                    .alloc_nolock(l)
                    .or_else(|_| self.fronts[front].alloc(l))
            } else {
                self.fronts[front].alloc(l)
            };
            match got {
                // SAFETY: a fresh object of at least `size` >= 8 bytes.
                Ok(p) => unsafe { th.stamp_and_hold(p.as_ptr(), size, front) },
                Err(e) => th.tally.violation(|| format!("kmalloc({size}): {e}")),
            }
        } else if !th.held.is_empty() && rng.one_in(8) {
            // krealloc a held object to a new size; the head stamp moves
            // with the contents, the tail stamp is rewritten.
            let i = rng.below(th.held.len() as u64) as usize;
            let new = 8 + rng.below(2048) as usize;
            let (ptr, size, front) = (th.held[i].ptr, th.held[i].size, th.held[i].front);
            let (Some(old), Some(p)) = (layout(size), NonNull::new(ptr as *mut u8)) else {
                return;
            };
            // SAFETY: a live object of this front allocated with `old`.
            match unsafe { self.fronts[front].krealloc(p, old, new, false) } {
                Ok(q) => {
                    let o = &mut th.held[i];
                    // SAFETY: `q` holds `new >= 8` bytes, ours.
                    let head = unsafe { q.as_ptr().cast::<u64>().read_unaligned() };
                    if head != o.stamp {
                        th.tally.violation(|| {
                            format!(
                                "krealloc {size} -> {new}: contents not kept at {:#x}",
                                q.as_ptr() as usize
                            )
                        });
                    }
                    // SAFETY: as above.
                    unsafe { write_stamp(q.as_ptr(), new, o.stamp) };
                    o.ptr = q.as_ptr() as usize;
                    o.size = new;
                }
                Err(e) => th
                    .tally
                    .violation(|| format!("krealloc {size} -> {new}: {e}")),
            }
        } else if !th.held.is_empty() {
            let o = th
                .held
                .swap_remove(rng.below(th.held.len() as u64) as usize);
            if rng.one_in(4) && self.inbox.len() > 1 {
                let other =
                    (th.t + 1 + rng.below(self.inbox.len() as u64 - 1) as usize) % self.inbox.len();
                self.inbox[other]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(o);
            } else {
                self.release(th, o);
            }
        }
    }

    /// Leaves a finished thread's objects and counts for [`finish`](Self::finish).
    pub fn park(&self, mut th: SlabThread) {
        // Out of the read-side section first; the frees refused inside it
        // are done now (they may wait for other threads' readers, which
        // leave as those threads park).
        self.leave(&mut th);
        let mut p = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        p.0.extend(th.held);
        p.1.add(&th.tally);
    }

    /// Deferred frees and bulk-allocated or bulk-freed objects so far.
    #[cfg(test)]
    pub fn mix(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.deferred.load(Relaxed), self.bulk.load(Relaxed))
    }

    /// Frees every object, destroys both allocators and counts what is left.
    pub fn finish(mut self) -> Tally {
        let (held, mut tally) =
            std::mem::take(&mut *self.parked.lock().unwrap_or_else(|e| e.into_inner()));
        let mut th = self.thread(0);
        let inboxes: Vec<Obj> = self
            .inbox
            .iter()
            .flat_map(|m| std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner())))
            .collect();
        for o in held.into_iter().chain(inboxes) {
            self.release(&mut th, o);
        }
        // Every thread has parked: no reader is left, so nothing is refused
        // and the barrier below waits for nobody.
        self.unpublish_all(&mut th);
        tally.add(&th.tally);
        let gp = self.gp;
        for (i, k) in self.fronts.iter_mut().enumerate() {
            // Every CPU's batch handed over and every grace period waited
            // for, then the caches destroyed.
            let r = k.destroy_deferred(gp);
            let large = k.large_bytes();
            if large != 0 {
                tally.leaked_pages += (large / 4096) as u64;
            }
            match r {
                Ok(()) => {}
                Err(DestroyError::DeferredPending { objects }) => {
                    tally.leaked_objects += objects as u64;
                    tally.first_problem.get_or_insert_with(|| {
                        format!("kmalloc front {i}: {objects} deferred frees never done")
                    });
                }
                Err(DestroyError::LiveObjects { remaining }) => {
                    tally.leaked_objects += remaining as u64;
                    tally.first_problem.get_or_insert_with(|| {
                        format!("kmalloc front {i}: {remaining} objects live after every kfree")
                    });
                }
                Err(e) => tally.violation(|| format!("kmalloc front {i}: destroy: {e}")),
            }
        }
        let left = self.arena.frames_in_use();
        tally.leaked_pages += left;
        if left != 0 {
            tally.first_problem.get_or_insert_with(|| {
                format!("kmalloc: {left} slab/large pages not back in the arena")
            });
        }
        tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The soak's kmalloc part on two threads: deferred frees and bulk
    /// calls happen, nothing is found broken, and every object and page is
    /// accounted for at the end.
    #[test]
    fn deferred_and_bulk_are_mixed_in_and_nothing_leaks() {
        let soak = SlabSoak::setup(2, 2).unwrap();
        std::thread::scope(|s| {
            for t in 0..2 {
                let soak = &soak;
                s.spawn(move || {
                    let mut rng = Rng::new(7, t as u64);
                    let mut th = soak.thread(t);
                    for _ in 0..20_000 {
                        soak.step(&mut th, &mut rng);
                    }
                    soak.park(th);
                });
            }
        });
        let (deferred, bulk) = soak.mix();
        assert!(deferred > 100, "{deferred} deferred frees");
        assert!(bulk > 100, "{bulk} bulk objects");
        let t = soak.finish();
        assert_eq!(t.violations, 0, "{:?}", t.first_problem);
        assert_eq!(
            t.leaked_objects + t.leaked_pages,
            0,
            "{:?}",
            t.first_problem
        );
    }
}
