//! Hosted CPUs by declaration (feature `std`): `nr` CPUs, and each thread
//! says which one it runs on ([`HostedCpus::run_on`]; 0 until it does).
//!
//! For hosted callers that pick per-CPU state by the calling CPU but model
//! their CPUs themselves (a benchmark thread per CPU, a loop that plays
//! CPU 0 of an 8-CPU machine): vmalloc's node and vmap-block choice. The
//! guard of [`pin`](CpuLocal::pin) holds the CPU's lock, so two threads
//! that declared the same CPU never run pinned sections on it at once, as
//! the [`CpuLocal`] contract asks; [`current_cpu`](CpuLocal::current_cpu)
//! answers the declaration, and per-CPU cells may be written from other
//! threads that declared the same CPU (`OWNER_ONLY_WRITES = false`).

use super::CpuLocal;
use core::cell::Cell;
use core::sync::atomic::{AtomicBool, Ordering};
use std::boxed::Box;
use std::vec::Vec;

std::thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// `nr` CPUs; a thread runs on the one it declared.
#[derive(Debug)]
pub struct HostedCpus {
    locks: Box<[AtomicBool]>,
}

/// Held while a thread is pinned to its CPU: that CPU's lock.
#[derive(Debug)]
pub struct HostedPin<'a> {
    lock: &'a AtomicBool,
}

impl Drop for HostedPin<'_> {
    fn drop(&mut self) {
        self.lock.store(false, Ordering::Release);
    }
}

impl HostedCpus {
    /// A machine of `nr` CPUs (at least 1).
    pub fn new(nr: usize) -> Self {
        Self {
            locks: (0..nr.max(1))
                .map(|_| AtomicBool::new(false))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        }
    }

    /// From now on the calling thread runs on CPU `cpu` (of every
    /// `HostedCpus`; taken modulo each one's count).
    pub fn run_on(cpu: usize) {
        CURRENT.with(|c| c.set(cpu));
    }

    fn current(&self) -> usize {
        CURRENT.with(Cell::get) % self.locks.len()
    }

    /// CPU `id`'s lock, waited for.
    fn lock(&self, id: usize) -> HostedPin<'_> {
        let lock = &self.locks[id];
        while lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        HostedPin { lock }
    }
}

// SAFETY: ids are `0..nr`; `pin`'s guard holds the CPU's lock, so no two
// threads run pinned on one id at once; `OWNER_ONLY_WRITES` is `false`
// (threads that declared the same CPU may write its cells concurrently
// outside a guard, so only the SMP CAS flavour is sound); `pinned_cpu` is
// never `Some`.
unsafe impl CpuLocal for HostedCpus {
    const OWNER_ONLY_WRITES: bool = false;
    type Guard<'a> = HostedPin<'a>;

    fn nr_cpus(&self) -> usize {
        self.locks.len()
    }

    fn current_cpu(&self) -> Option<usize> {
        Some(self.current())
    }

    fn pin(&self) -> (HostedPin<'_>, usize) {
        let id = self.current();
        (self.lock(id), id)
    }

    /// Every CPU in turn, under its lock: what a thread that declared it
    /// would hold.
    fn on_each_cpu(&self, f: &(dyn Fn(usize) + Sync)) -> usize {
        for id in 0..self.locks.len() {
            let _g = self.lock(id);
            f(id);
        }
        self.locks.len()
    }

    /// One attempt at the CPU's lock: a handler that interrupted the holder
    /// on this thread finds it taken.
    fn try_pin_nolock(&self) -> Option<(HostedPin<'_>, usize)> {
        let id = self.current();
        let lock = &self.locks[id];
        lock.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| (HostedPin { lock }, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_runs_where_it_declared() {
        let cpus = HostedCpus::new(4);
        assert_eq!((cpus.nr_cpus(), cpus.current_cpu()), (4, Some(0)));
        HostedCpus::run_on(6);
        assert_eq!(cpus.current_cpu(), Some(2), "taken modulo the count");
        let (g, id) = cpus.pin();
        assert_eq!(id, 2);
        assert!(
            cpus.locks[2].load(Ordering::Relaxed),
            "pinned: the CPU is held"
        );
        drop(g);
        assert!(!cpus.locks[2].load(Ordering::Relaxed));
        std::thread::spawn(move || assert_eq!(cpus.current_cpu(), Some(0)))
            .join()
            .unwrap();
    }

    #[test]
    fn on_each_cpu_holds_each_cpus_lock_in_turn() {
        let cpus = HostedCpus::new(3);
        HostedCpus::run_on(1);
        let seen = std::sync::Mutex::new(Vec::new());
        let ran = cpus.on_each_cpu(&|id| {
            assert!(cpus.locks[id].load(Ordering::Relaxed), "CPU {id} not held");
            let held = cpus
                .locks
                .iter()
                .filter(|l| l.load(Ordering::Relaxed))
                .count();
            assert_eq!(held, 1, "one CPU at a time");
            seen.lock().unwrap().push(id);
        });
        assert_eq!((ran, seen.into_inner().unwrap()), (3, std::vec![0, 1, 2]));
        assert!(cpus.locks.iter().all(|l| !l.load(Ordering::Relaxed)));
    }
}
