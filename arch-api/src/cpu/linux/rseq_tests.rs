//! The rseq try-lock against remote takers, with the section's window
//! between test and commit widened so that a remote taker lands in it
//! often; the broken variant (remote takers without the fence) must be
//! caught there.

use super::*;
use core::sync::atomic::{AtomicBool, AtomicUsize};
use std::eprintln;
use std::sync::atomic::AtomicU64;
use std::vec::Vec;

/// The section with ~hundreds of pause loops between the test and the
/// commit (the counter register ends at 0, as the section expects).
fn try_local_wide(locks: &[CpuLock], nr: usize) -> Local {
    let (id, busy) = rseq_try_lock!(
        locks.as_ptr(),
        nr,
        "mov {busy:e}, 300\n9:\npause\ndec {busy:e}\njnz 9b"
    );
    classify(id, busy, nr)
}

struct Arena {
    locks: Vec<CpuLock>,
    owner: Vec<AtomicUsize>,
    overlaps: AtomicU64,
    taken: AtomicU64,
}

impl Arena {
    fn enter_exit(&self, id: usize, me: usize) {
        self.taken.fetch_add(1, Ordering::Relaxed);
        if self.owner[id].swap(me, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        for _ in 0..50 {
            core::hint::spin_loop();
        }
        if self.owner[id]
            .compare_exchange(me, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: this thread took the lock (the test checks that no one
        // else did).
        unsafe { self.locks[id].unlock() };
    }
}

/// Local threads on every CPU and two remote takers, until the remote
/// takers took `takes` locks between them (or made a million tries each);
/// the number of times two holders were inside one CPU's lock at once,
/// and the remote takes.
fn hammer(fenced: bool, takes: u64) -> (u64, u64) {
    let nr = crate::cpu::linux::possible_cpus();
    let a = Arena {
        locks: (0..nr).map(|_| CpuLock::new()).collect(),
        owner: (0..nr).map(|_| AtomicUsize::new(0)).collect(),
        overlaps: AtomicU64::new(0),
        taken: AtomicU64::new(0),
    };
    let done = AtomicBool::new(false);
    let remote_taken = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (a, done) = (&a, &done);
            s.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    if let Local::Taken(id) = try_local_wide(&a.locks, nr) {
                        a.enter_exit(id, 1 + t);
                    }
                }
            });
        }
        let remotes: Vec<_> = (0..2)
            .map(|t| {
                let (a, remote_taken) = (&a, &remote_taken);
                s.spawn(move || {
                    remote_taker(t, &a.locks, fenced, remote_taken, takes, |id| {
                        a.enter_exit(id, 100 + t as usize)
                    })
                })
            })
            .collect();
        for r in remotes {
            r.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    (
        a.overlaps.load(Ordering::Relaxed),
        remote_taken.load(Ordering::Relaxed),
    )
}

#[test]
#[cfg_attr(miri, ignore = "rseq and membarrier: inline asm and syscalls")]
fn remote_takers_and_rseq_sections_exclude_each_other() {
    if !active() {
        eprintln!("rseq not active in this process (no glibc area or membarrier): nothing to test");
        return;
    }
    let (overlaps, remote) = hammer(true, 20_000);
    eprintln!("fenced: {overlaps} overlaps, {remote} remote takes");
    assert_eq!(overlaps, 0, "two holders at once ({remote} remote takes)");
    assert!(
        remote > 0,
        "no remote take succeeded: the test tested nothing"
    );
}

#[test]
#[cfg_attr(miri, ignore = "rseq and membarrier: inline asm and syscalls")]
fn remote_takers_without_the_fence_are_caught() {
    if !active() {
        eprintln!("rseq not active in this process: nothing to test");
        return;
    }
    // Several rounds: each is usually enough alone.
    let caught = (0..10).any(|_| {
        let (overlaps, remote) = hammer(false, 20_000);
        eprintln!("unfenced: {overlaps} overlaps, {remote} remote takes");
        overlaps > 0
    });
    assert!(caught, "the unfenced remote taker was never caught");
}

#[test]
#[cfg_attr(miri, ignore = "rseq and membarrier: inline asm and syscalls")]
fn the_local_section_takes_the_callers_cpu_and_sees_holders() {
    if !active() {
        eprintln!("rseq not active in this process: nothing to test");
        return;
    }
    let nr = crate::cpu::linux::possible_cpus();
    let locks: Vec<CpuLock> = (0..nr).map(|_| CpuLock::new()).collect();
    // SAFETY: `active()`; `nr` locks.
    let Local::Taken(id) = (unsafe { try_local(&locks, nr) }) else {
        panic!("a free lock was not taken");
    };
    assert_eq!(locks[id].0.load(Ordering::Relaxed), LOCAL);
    assert_disarmed();
    assert!(
        !try_remote(&locks[id], id),
        "a held lock was taken remotely"
    );
    // Held: a section on this CPU says busy (or the thread moved and took
    // the other CPU's lock; retry until it runs on `id` again).
    let mut saw_busy = false;
    for _ in 0..1000 {
        // SAFETY: as above.
        match unsafe { try_local(&locks, nr) } {
            Local::Busy(b) => {
                assert_eq!(b, id);
                saw_busy = true;
                break;
            }
            Local::Taken(other) => {
                assert_ne!(other, id);
                // SAFETY: just taken by this thread.
                unsafe { locks[other].unlock() };
            }
            Local::NoCpu => panic!("a registered thread without a cpu id"),
        }
        std::thread::yield_now();
    }
    assert!(saw_busy);
    // SAFETY: taken above.
    unsafe { locks[id].unlock() };
    assert!(
        try_remote(&locks[id], id),
        "a free lock was refused remotely"
    );
    assert!(locks[id].0.load(Ordering::Relaxed) > LOCAL, "a ticket");
    // SAFETY: taken just above.
    unsafe { locks[id].unlock() };
}
