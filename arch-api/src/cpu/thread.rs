//! Hosted thread-as-CPU backend (the hosted default): each thread is a CPU.
//!
//! A thread takes a free slot from a global pool of [`MAX_THREAD_CPUS`] the
//! first time it allocates and gives it back when it exits, so slots are
//! exclusive: only one thread at a time writes a slot's state, and the fast
//! path can use the CPU-local DW-CAS. A thread that cannot hold a slot of its
//! own (pool full, or its thread-locals are being set up or torn down, which
//! happens when the allocator is the `#[global_allocator]`) borrows a free
//! slot for the length of one operation through [`CpuLocal::pin`].

use super::CpuLocal;
use core::cell::Cell;
use core::sync::atomic::{AtomicU64, Ordering};

/// Slots in the pool (per-CPU arrays are sized for this many CPUs).
pub const MAX_THREAD_CPUS: usize = 128;
const WORDS: usize = MAX_THREAD_CPUS / 64;

static POOL: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];

const UNSET: u32 = u32::MAX;
const BUSY: u32 = u32::MAX - 1;
const DEAD: u32 = u32::MAX - 2;

std::thread_local! {
    // No destructor: readable even while other thread-locals are torn down.
    static SLOT: Cell<u32> = const { Cell::new(UNSET) };
    // Its destructor gives the slot back.
    static HOLDER: Holder = const { Holder };
}

struct Holder;

impl Drop for Holder {
    fn drop(&mut self) {
        let id = SLOT.with(|s| s.replace(DEAD));
        if (id as usize) < MAX_THREAD_CPUS {
            release(id as usize);
        }
    }
}

fn try_acquire() -> Option<usize> {
    for (w, word) in POOL.iter().enumerate() {
        let mut cur = word.load(Ordering::Relaxed);
        while cur != u64::MAX {
            let bit = (!cur).trailing_zeros() as usize;
            match word.compare_exchange_weak(
                cur,
                cur | 1 << bit,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(w * 64 + bit),
                Err(seen) => cur = seen,
            }
        }
    }
    None
}

/// Takes slot `id` if no thread holds it.
fn try_acquire_id(id: usize) -> bool {
    let bit = 1 << (id % 64);
    // Acquire: as `try_acquire`, the slot's state as its last holder left it.
    POOL[id / 64].fetch_or(bit, Ordering::Acquire) & bit == 0
}

fn release(id: usize) {
    // Release: the slot's per-CPU state written by this thread is visible to
    // the next thread that acquires the slot.
    POOL[id / 64].fetch_and(!(1 << (id % 64)), Ordering::Release);
}

/// Each thread is a CPU (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadCpus;

impl ThreadCpus {
    /// The backend (all instances share the one slot pool).
    pub const fn new() -> Self {
        ThreadCpus
    }

    #[cold]
    fn register() -> Option<usize> {
        SLOT.with(|s| s.set(BUSY));
        let Some(id) = try_acquire() else {
            SLOT.with(|s| s.set(UNSET));
            return None;
        };
        // Registers the destructor; may allocate (and re-enter the allocator,
        // which then sees BUSY and borrows a slot).
        if HOLDER.try_with(|_| ()).is_err() {
            release(id);
            SLOT.with(|s| s.set(DEAD));
            return None;
        }
        SLOT.with(|s| s.set(id as u32));
        Some(id)
    }
}

/// A slot borrowed for one operation; returned on drop.
#[derive(Debug)]
pub struct BorrowedSlot(Option<usize>);

impl Drop for BorrowedSlot {
    // Inlined so that the common guard (a thread with its own slot, `None`)
    // costs nothing on the sheaves fast path.
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(id) = self.0 {
            release_cold(id);
        }
    }
}

#[cold]
#[inline(never)]
fn release_cold(id: usize) {
    release(id);
}

// SAFETY: slots are exclusive (a pool bit is owned by one thread, or by one
// borrowed guard), so only one thread of execution writes a slot's state at
// a time; hand-over between threads is ordered by the pool's
// acquire/release.
unsafe impl CpuLocal for ThreadCpus {
    const OWNER_ONLY_WRITES: bool = true;
    const HAS_PINNED_CPU: bool = true;
    type Guard<'a> = BorrowedSlot;

    #[inline(always)]
    fn nr_cpus(&self) -> usize {
        MAX_THREAD_CPUS
    }

    #[inline(always)]
    fn current_cpu(&self) -> Option<usize> {
        match SLOT.try_with(|s| s.get()) {
            Ok(id) if (id as usize) < MAX_THREAD_CPUS => Some(id as usize),
            Ok(UNSET) => Self::register(),
            _ => None,
        }
    }

    #[inline(always)]
    fn pin(&self) -> (BorrowedSlot, usize) {
        // A thread with a slot of its own is pinned by construction (the
        // slot is exclusive): the guard is empty and the fast path pays one
        // thread-local load, no atomic.
        if let Some(id) = self.current_cpu() {
            return (BorrowedSlot(None), id);
        }
        Self::borrow_slot()
    }

    /// The calling thread's slot, and every slot no thread holds, each
    /// taken from the pool for the call as a borrowed slot is: a thread that
    /// exited left its slot's per-CPU state (a CPU slab, partial slabs, a
    /// sheaf) for whichever thread takes the slot next, and this reaches
    /// it. A slot another live thread holds is not reached: a thread runs
    /// only its own code, as a CPU runs only what it is sent.
    fn on_each_cpu(&self, f: &(dyn Fn(usize) + Sync)) -> usize {
        let mine = self.current_cpu();
        let mut ran = 0;
        if let Some(id) = mine {
            f(id);
            ran += 1;
        }
        for id in (0..MAX_THREAD_CPUS).filter(|&id| Some(id) != mine) {
            if try_acquire_id(id) {
                let _slot = BorrowedSlot(Some(id));
                f(id);
                ran += 1;
            }
        }
        ran
    }

    #[inline(always)]
    fn pinned_cpu(&self) -> Option<usize> {
        // A slot is exclusive to the thread holding it, so the thread is
        // pinned to it by construction. Unset, busy or dead: take `pin`.
        match SLOT.try_with(|s| s.get()) {
            Ok(id) if (id as usize) < MAX_THREAD_CPUS => Some(id as usize),
            _ => {
                cold();
                None
            }
        }
    }
}

/// Marks the path that calls it as unlikely (`core::hint::cold_path` is
/// newer than the workspace's minimum Rust).
#[cold]
#[inline]
fn cold() {}

impl ThreadCpus {
    #[cold]
    #[inline(never)]
    fn borrow_slot() -> (BorrowedSlot, usize) {
        loop {
            if let Some(id) = try_acquire() {
                return (BorrowedSlot(Some(id)), id);
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;

    #[test]
    fn threads_get_distinct_slots_and_give_them_back() {
        let _one = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        let cpus = ThreadCpus::new();
        let mine = cpus.current_cpu().unwrap();
        assert_eq!(cpus.current_cpu(), Some(mine), "stable within a thread");
        let other = std::thread::spawn(move || ThreadCpus.current_cpu().unwrap())
            .join()
            .unwrap();
        assert_ne!(mine, other);
        // The exited thread's slot is free again: a borrowed slot can take it.
        let (g, id) = {
            let id = try_acquire().unwrap();
            (BorrowedSlot(Some(id)), id)
        };
        assert_ne!(id, mine);
        drop(g);
    }

    /// Slots are the process's: the tests that count which thread holds
    /// which run one at a time.
    static SLOTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn on_each_cpu_reaches_its_own_slot_and_free_ones_not_a_live_threads() {
        use std::sync::{Barrier, Mutex};
        let _one = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        let cpus = ThreadCpus::new();
        let mine = cpus.current_cpu().unwrap();
        let (held, go) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|s| {
            let live = s.spawn(|| {
                let id = ThreadCpus.current_cpu().unwrap();
                held.wait();
                go.wait();
                id
            });
            held.wait();
            // Its slot is given back before `join` returns.
            let exited = std::thread::spawn(|| ThreadCpus.current_cpu().unwrap())
                .join()
                .unwrap();
            let seen = Mutex::new(std::vec::Vec::new());
            let ran = cpus.on_each_cpu(&|cpu| seen.lock().unwrap().push(cpu));
            go.wait();
            let live = live.join().unwrap();
            let seen = seen.into_inner().unwrap();
            assert_eq!(ran, seen.len());
            assert!(seen.contains(&mine) && seen.contains(&exited));
            assert!(!seen.contains(&live), "a live thread's slot was taken");
            let mut sorted = seen.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), seen.len(), "a slot reached twice");
            // Every slot borrowed for the call went back to the pool.
            assert!(try_acquire_id(exited));
            release(exited);
        });
    }
}
