//! A loom model of the protocol between `LinuxCpus`' guard-free stack steps
//! and a holder of the CPU's guard (`CpuLocal::stop_local` /
//! `restart_local`, module `cpu/linux/rseq_stack.rs`).
//!
//! The steps themselves are rseq critical sections in inline asm, which loom
//! cannot run; their real code is tested by the token hammer in
//! `rseq_stack_tests.rs` (with its broken variant). This model checks the
//! protocol's argument on loom's memory model, with what the kernel
//! provides stood in for:
//!
//! * one CPU runs one thread at a time, and a section preempted before its
//!   commit aborts, so a section that commits ran from its first load to
//!   its commit with nothing else on that CPU in between: the section holds
//!   a mutex standing for the CPU;
//! * `membarrier(PRIVATE_EXPEDITED_RSEQ)` aimed at the CPU returns only
//!   once every section that was running there has committed or aborted,
//!   with full barriers on both sides: the holder takes and drops the
//!   CPU's mutex;
//! * x86 keeps loads in order and stores in order: the section's loads are
//!   `Acquire` and the holder's stores `Release`.
//!
//! A remote holder stops the stack (capacity 0), fences, pops a token and
//! pushes it back, and restores the capacity, while a thread on the CPU
//! pops and pushes a token through sections. Every token must survive. The
//! broken variants leave out the fence, or load the length before the
//! capacity, and loom must find a token lost or doubled.
#![cfg(kmm_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

const CAP: usize = 3;

/// One CPU's stack (its three words, the slots inline) and the CPU.
struct Cpu {
    slots: [AtomicUsize; CAP],
    len: AtomicUsize,
    cap: AtomicUsize,
    /// Held by whatever runs on the CPU for the length of a section.
    running: Mutex<()>,
}

#[derive(Clone, Copy)]
struct Variant {
    fenced: bool,
    cap_first: bool,
}

impl Cpu {
    fn new(tokens: &[usize]) -> Self {
        let slot = |i: usize| AtomicUsize::new(tokens.get(i).copied().unwrap_or(0));
        Self {
            slots: [slot(0), slot(1), slot(2)],
            len: AtomicUsize::new(tokens.len()),
            cap: AtomicUsize::new(CAP),
            running: Mutex::new(()),
        }
    }

    /// The section's first loads: (capacity, length), in the variant's
    /// order.
    fn head(&self, v: Variant) -> (usize, usize) {
        if v.cap_first {
            let c = self.cap.load(Ordering::Acquire);
            (c, self.len.load(Ordering::Acquire))
        } else {
            let n = self.len.load(Ordering::Acquire);
            (self.cap.load(Ordering::Acquire), n)
        }
    }

    /// The pop section: capacity, length, slot, then the commit.
    fn pop(&self, v: Variant) -> Option<usize> {
        let _on = self.running.lock().unwrap();
        let (cap, len) = self.head(v);
        let n = len.wrapping_sub(1);
        if n >= cap {
            return None;
        }
        let t = self.slots[n].load(Ordering::Acquire);
        self.len.store(n, Ordering::Release);
        Some(t)
    }

    /// The push section: the slot above the length, then the commit.
    fn push(&self, t: usize, v: Variant) -> bool {
        let _on = self.running.lock().unwrap();
        let (cap, n) = self.head(v);
        if n >= cap {
            return false;
        }
        self.slots[n].store(t, Ordering::Release);
        self.len.store(n + 1, Ordering::Release);
        true
    }

    /// A holder of the CPU's guard on another CPU: stop, fence, pop a token
    /// and push it back, restart.
    fn holder_round_trip(&self, v: Variant) -> Option<usize> {
        self.cap.store(0, Ordering::Release);
        if v.fenced {
            // `membarrier` aimed at the CPU.
            drop(self.running.lock().unwrap());
        }
        let n = self.len.load(Ordering::Acquire);
        let got = (n > 0).then(|| {
            let t = self.slots[n - 1].load(Ordering::Acquire);
            self.len.store(n - 1, Ordering::Release);
            t
        });
        self.cap.store(CAP, Ordering::Release);
        got
    }

    fn tokens(&self) -> Vec<usize> {
        let n = self.len.load(Ordering::Acquire);
        let mut t: Vec<usize> = (0..n)
            .map(|i| self.slots[i].load(Ordering::Acquire))
            .collect();
        t.sort_unstable();
        t
    }
}

fn model(v: Variant) {
    loom::model(move || {
        let cpu = Arc::new(Cpu::new(&[1, 2]));
        let holder = {
            let cpu = cpu.clone();
            thread::spawn(move || cpu.holder_round_trip(v))
        };
        // The thread on the CPU: a pop, then the token back (a push that
        // misses while the stack is stopped keeps the token in hand).
        let mut hand = Vec::new();
        if let Some(t) = cpu.pop(v) {
            hand.push(t);
        }
        let held = holder.join().unwrap();
        hand.extend(held);
        for t in std::mem::take(&mut hand) {
            if !cpu.push(t, v) {
                hand.push(t);
            }
        }
        let mut all = cpu.tokens();
        all.extend(hand);
        all.sort_unstable();
        assert_eq!(all, [1, 2], "a token was lost or doubled");
    });
}

#[test]
fn stopped_and_fenced_stacks_keep_every_token() {
    model(Variant {
        fenced: true,
        cap_first: true,
    });
}

#[test]
#[should_panic(expected = "a token was lost or doubled")]
fn a_stop_without_the_fence_loses_tokens() {
    model(Variant {
        fenced: false,
        cap_first: true,
    });
}

#[test]
#[should_panic(expected = "a token was lost or doubled")]
fn reading_the_length_before_the_capacity_loses_tokens() {
    model(Variant {
        fenced: true,
        cap_first: false,
    });
}
