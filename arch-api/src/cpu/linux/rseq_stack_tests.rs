//! The pop/push sections: their answers on one thread, and the tokens
//! they move between threads, CPUs and remote lock holders, with the window
//! between the word's load and the commit widened; the broken variant
//! (remote holders that stop a stack without the fence) must lose or
//! duplicate a token there.

use super::super::rseq::{self, assert_disarmed};
use super::super::{CpuLock, possible_cpus};
use super::*;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::boxed::Box;
use std::eprintln;
use std::vec;
use std::vec::Vec;

/// One CPU's description (slot pointer, length, capacity), alone on its
/// line (as the sections expect).
#[repr(C, align(64))]
struct Head {
    slots: *mut usize,
    len: usize,
    cap: usize,
}

/// Per-CPU stacks of `cap` slots.
struct Stacks {
    heads: Vec<Head>,
    store: Vec<Box<[usize]>>,
}

impl Stacks {
    fn new(nr: usize, cap: usize) -> Self {
        let mut store: Vec<Box<[usize]>> = (0..nr).map(|_| vec![0; cap].into()).collect();
        let heads = store
            .iter_mut()
            .map(|s| Head {
                slots: s.as_mut_ptr(),
                len: 0,
                cap,
            })
            .collect();
        Self { heads, store }
    }

    fn desc(&self) -> LocalStacks {
        // SAFETY: every description points to its `cap` slots, kept alive
        // by `store` while `self` lives.
        unsafe { LocalStacks::new(self.heads.as_ptr().cast(), LocalStacks::LINE) }
    }

    /// Every token on every stack (after the threads are gone).
    fn tokens(&self) -> Vec<usize> {
        self.heads
            .iter()
            .flat_map(|h| {
                (0..h.len).map(move |i| {
                    // SAFETY: the first `len` slots of a stack hold tokens.
                    unsafe { *h.slots.add(i) }
                })
            })
            .collect()
    }
}

// SAFETY: the stacks are written only by the sections and by holders of
// their CPU's lock: the discipline under test, which the token count checks.
unsafe impl Sync for Stacks {}

fn locks(nr: usize) -> Vec<CpuLock> {
    (0..nr).map(|_| CpuLock::new()).collect()
}

fn pop_wide(nr: usize, s: &LocalStacks) -> LocalOp {
    let (id, v) = rseq_pop!(
        nr,
        s,
        "6",
        "mov {w:e}, 300\n9:\npause\ndec {w:e}\njnz 9b",
        (w = out(reg) _,)
    );
    classify(id, v)
}

fn push_wide(nr: usize, s: &LocalStacks, value: usize) -> LocalOp {
    let id = rseq_push!(
        nr,
        s,
        value,
        "6",
        "mov {w:e}, 300\n9:\npause\ndec {w:e}\njnz 9b",
        (w = out(reg) _,)
    );
    classify(id, 0)
}

/// `pop` for the tests, which check `active()` first and pass stacks for
/// `nr` CPUs.
fn pop_at(nr: usize, d: &LocalStacks) -> LocalOp {
    // SAFETY: the contract above, which every caller here keeps.
    unsafe { pop(nr, d) }
}

/// `push` for the tests (as `pop_at`).
fn push_at(nr: usize, d: &LocalStacks, v: usize) -> LocalOp {
    // SAFETY: as in `pop_at`.
    unsafe { push(nr, d, v) }
}

/// Pushes `v` onto a stack with room, retrying the misses that aborts
/// cause (preemption, migration or a signal inside the section: rare, but
/// a loaded CI machine hit one); the CPU it went to.
fn push_with_room(nr: usize, d: &LocalStacks, v: usize) -> usize {
    for _ in 0..10_000 {
        match push_at(nr, d, v) {
            LocalOp::Done { cpu, .. } => return cpu,
            LocalOp::Miss => std::thread::yield_now(),
            other => panic!("push onto a stack with room: {other:?}"),
        }
    }
    panic!("push onto a stack with room missed 10 000 times");
}

#[test]
#[cfg_attr(miri, ignore = "rseq: inline asm")]
fn the_sections_pop_and_push_the_callers_cpu_stack() {
    if !rseq::active() {
        eprintln!("rseq not active in this process: nothing to test");
        return;
    }
    let nr = possible_cpus();
    let st = Stacks::new(nr, 4);
    let d = st.desc();
    assert_eq!(pop_at(nr, &d), LocalOp::Miss, "empty stacks");
    let mut pushed = Vec::new();
    for v in 1..=3usize {
        pushed.push((push_with_room(nr, &d, v), v));
    }
    assert_disarmed();
    let on = |cpu: usize| {
        let h = &st.heads[cpu];
        // SAFETY: the first `len` slots hold what was pushed.
        (0..h.len)
            .map(|i| unsafe { *h.slots.add(i) })
            .collect::<Vec<_>>()
    };
    for &(cpu, v) in &pushed {
        assert!(on(cpu).contains(&v));
    }
    // Every stack stopped (as a guard holder does): both steps miss, and
    // change nothing.
    for cpu in 0..nr {
        // SAFETY: the test has the stacks to itself.
        unsafe { stop(cpu, d.cap_word(cpu), true) };
    }
    assert_eq!(push_at(nr, &d, 9), LocalOp::Miss);
    assert_eq!(pop_at(nr, &d), LocalOp::Miss);
    assert_eq!(st.tokens().len(), 3);
    for cpu in 0..nr {
        // SAFETY: as above.
        unsafe { *d.cap_word(cpu) = 4 };
    }
    // Pop what is there (the thread may move between CPUs: pop until every
    // stack the pushes used is empty, at most a few misses per move).
    let mut popped = Vec::new();
    for _ in 0..10_000 {
        if popped.len() == 3 {
            break;
        }
        if let LocalOp::Done { cpu, value } = pop_at(nr, &d) {
            assert!(pushed.contains(&(cpu, value)), "{value} from CPU {cpu}");
            popped.push(value);
        } else {
            std::thread::yield_now();
        }
    }
    popped.sort_unstable();
    assert_eq!(popped, [1, 2, 3]);
    assert_disarmed();
    // Full stacks and a stand-in (length above `cap`) make a push miss.
    let (mut full, mut stand_in) = (Stacks::new(nr, 2), Stacks::new(nr, 2));
    for (f, i) in full.heads.iter_mut().zip(&mut stand_in.heads) {
        f.len = 2;
        i.len = usize::MAX;
    }
    assert_eq!(push_at(nr, &full.desc(), 7), LocalOp::Miss);
    assert_eq!(push_at(nr, &stand_in.desc(), 7), LocalOp::Miss);
    assert_eq!(pop_at(nr, &stand_in.desc()), LocalOp::Miss);
    // A capacity of 0 turns the steps off, whatever the length: the
    // capacity is read from the line, not from the description.
    let mut off = Stacks::new(nr, 2);
    for h in &mut off.heads {
        h.len = 1;
        h.cap = 0;
    }
    assert_eq!(pop_at(nr, &off.desc()), LocalOp::Miss);
    assert_eq!(push_at(nr, &off.desc(), 7), LocalOp::Miss);
    assert!(off.heads.iter().all(|h| h.len == 1));
}

/// Descriptions a row apart ([`LocalStacks::ROW`]: 16 lines per CPU, the
/// one used in column 5): a push and a pop reach the caller's CPU's
/// description in that column and nothing else in the rows.
#[test]
#[cfg_attr(miri, ignore = "rseq: inline asm")]
fn the_sections_reach_a_column_of_rows() {
    if !rseq::active() {
        eprintln!("rseq not active in this process: nothing to test");
        return;
    }
    const COLUMN: usize = 5;
    let nr = possible_cpus();
    let mut store: Vec<Box<[usize]>> = (0..nr).map(|_| vec![0; 4].into()).collect();
    // 16 heads per CPU; the others keep a length above `cap` (no stack).
    let mut rows: Vec<Head> = (0..nr * 16)
        .map(|_| Head {
            slots: core::ptr::null_mut(),
            len: usize::MAX,
            cap: 4,
        })
        .collect();
    for (cpu, s) in store.iter_mut().enumerate() {
        rows[cpu * 16 + COLUMN] = Head {
            slots: s.as_mut_ptr(),
            len: 0,
            cap: 4,
        };
    }
    // SAFETY: column 5 of every row points to 4 slots kept alive by
    // `store`; the other heads have lengths above `cap`.
    let d =
        unsafe { LocalStacks::new(rows.as_ptr().wrapping_add(COLUMN).cast(), LocalStacks::ROW) };
    // On the last CPU, so that a wrong stride cannot land on the right head
    // by being multiplied by 0 (best effort: the push says where it ran).
    // SAFETY: a zeroed set with one CPU, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(nr - 1, &mut set);
        libc::sched_setaffinity(0, core::mem::size_of_val(&set), &set);
    }
    let cpu = push_with_room(nr, &d, 77);
    assert_disarmed();
    let used: Vec<usize> = (0..nr * 16).filter(|&i| rows[i].len == 1).collect();
    assert_eq!(
        used,
        [cpu * 16 + COLUMN],
        "the push went to its CPU's column"
    );
    // SAFETY: that stack's first slot holds what was pushed.
    assert_eq!(unsafe { *rows[cpu * 16 + COLUMN].slots }, 77);
    let mut popped = None;
    for _ in 0..10_000 {
        if let LocalOp::Done { cpu: c, value } = pop_at(nr, &d) {
            popped = Some((c, value));
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(popped, Some((cpu, 77)));
    assert!(
        (0..nr * 16).all(|i| rows[i].len == if i % 16 == COLUMN { 0 } else { usize::MAX }),
        "only the column's lengths change"
    );
}

/// Tokens `1..=TOKENS` start on CPU 0's stack. Four threads pop a token
/// and push it back (both through the widened sections); two remote
/// holders take a random CPU's lock, stop its stack (fenced, or in the
/// broken variant not), pop a token, restart the stack, release, and push
/// the token back through a section. Returns the tokens that came out
/// twice or not at all, and the remote takes.
fn hammer(fenced: bool, takes: u64) -> (usize, u64) {
    const TOKENS: usize = 200;
    let nr = possible_cpus();
    let (l, st) = (locks(nr), Stacks::new(nr, 2 * TOKENS));
    let mut st = st;
    st.store[0].iter_mut().enumerate().for_each(|(i, t)| {
        if i < TOKENS {
            *t = i + 1;
        }
    });
    st.heads[0].len = TOKENS;
    let (l, done, remote_taken) = (&l, AtomicBool::new(false), AtomicU64::new(0));
    let (done, remote_taken, st) = (&done, &remote_taken, &st);
    // A thread holding a token pushes it back: a push misses while a stack
    // is stopped, which passes, or on a full stack, which only doubled
    // tokens (the broken variant) can fill: those go to `spill`.
    let spill = &std::sync::Mutex::new(Vec::new());
    let give_back = move |d: &LocalStacks, v: usize| {
        for _ in 0..1_000 {
            if let LocalOp::Done { .. } = push_wide(nr, d, v) {
                return;
            }
            std::thread::yield_now();
        }
        spill.lock().unwrap().push(v);
    };
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(move || {
                let d = &st.desc();
                while !done.load(Ordering::Relaxed) {
                    if let LocalOp::Done { value, .. } = pop_wide(nr, d) {
                        give_back(d, value);
                    }
                }
            });
        }
        let remotes: Vec<_> = (0..2u64)
            .map(|t| {
                s.spawn(move || {
                    let d = &st.desc();
                    rseq::remote_taker(t, l, true, remote_taken, takes, |id| {
                        // SAFETY: we hold CPU `id`'s lock, so its stack is
                        // ours to stop, use and restart.
                        let got = unsafe {
                            stop(id, d.cap_word(id), fenced);
                            let got = d.pop_pinned(id, 2 * TOKENS);
                            core::sync::atomic::AtomicUsize::from_ptr(d.cap_word(id))
                                .store(2 * TOKENS, Ordering::Release);
                            got
                        };
                        // SAFETY: taken by `remote_taker`.
                        unsafe { l[id].unlock() };
                        if let Some(v) = got {
                            give_back(d, v);
                        }
                    })
                })
            })
            .collect();
        for r in remotes {
            r.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let mut seen = vec![0u32; TOKENS + 1];
    for t in st
        .tokens()
        .into_iter()
        .chain(spill.lock().unwrap().drain(..))
    {
        seen[t] += 1;
    }
    let wrong = seen[1..].iter().filter(|&&n| n != 1).count();
    (wrong, remote_taken.load(Ordering::Relaxed))
}

#[test]
#[cfg_attr(miri, ignore = "rseq and membarrier: inline asm and syscalls")]
fn every_token_survives_sections_and_remote_holders() {
    if !rseq::active() {
        eprintln!("rseq not active in this process: nothing to test");
        return;
    }
    let (wrong, remote) = hammer(true, 20_000);
    eprintln!("fenced: {wrong} tokens lost or doubled, {remote} remote takes");
    assert_eq!(wrong, 0, "tokens lost or doubled ({remote} remote takes)");
    assert!(
        remote > 0,
        "no remote take succeeded: the test tested nothing"
    );
}

#[test]
#[cfg_attr(miri, ignore = "rseq and membarrier: inline asm and syscalls")]
fn remote_holders_without_the_fence_lose_tokens() {
    if !rseq::active() {
        eprintln!("rseq not active in this process: nothing to test");
        return;
    }
    // Usually the first round; up to 40 on a loaded machine (a round is a
    // few milliseconds).
    let caught = (0..40).any(|_| {
        let (wrong, remote) = hammer(false, 5_000);
        eprintln!("unfenced: {wrong} tokens lost or doubled, {remote} remote takes");
        wrong > 0
    });
    assert!(caught, "the unfenced remote holder was never caught");
}
