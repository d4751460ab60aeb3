//! One step on the caller's CPU's stack of words, with no guard: what a
//! backend that can run a restartable sequence (Linux user space's rseq, a
//! kernel whose per-CPU operations are preemption-safe) offers the sheaves
//! front, so that a `malloc`/`free` that hits its CPU's sheaf pays neither a
//! lock nor a guard.
//!
//! The front describes where its stacks are ([`LocalStacks`]); the backend
//! pops or pushes one word on the stack of the CPU it runs on and commits
//! with one store, or says that it did nothing. The step must be atomic with
//! respect to every other user of that CPU's stacks: other code on that CPU
//! (preemption, signals or interrupts between the CPU id's read and the
//! commit restart the step or make it miss), and holders of that CPU's
//! [`pin`](super::CpuLocal::pin) guard, on any CPU. A holder that touches
//! a stack stops its steps first
//! ([`stop_local`](super::CpuLocal::stop_local): the stack's capacity
//! becomes 0, fenced against steps in flight) and restarts them when done
//! ([`restart_local`](super::CpuLocal::restart_local)), so the steps read
//! nothing but the stack's own line.
//!
//! The default answer is [`LocalOp::Pin`]: the caller pins and does the same
//! under the guard, as before.

/// Where a front keeps one LIFO stack of `usize` words per CPU.
///
/// CPU `i`'s stack is described by three words at
/// `heads + (i << head_shift)` bytes: a pointer to its slot 0, its length
/// (the slots being the `usize`s from slot 0 on) and its capacity. The
/// step reads that one line and then the slot: the capacity sits in the
/// line the step reads anyway, not in the front's own structure (one line
/// fewer per step; BENCHMARKS.md, session 20). A length above the
/// capacity (a CPU without a stack, whose slot pointer may be null) makes
/// both steps miss, so there is no separate null test, and a capacity of
/// 0 turns a CPU's steps off. Backends' guard-free steps may handle only
/// the strides [`LINE`](Self::LINE) and [`ROW`](Self::ROW) and answer
/// [`LocalOp::Pin`] for others.
#[derive(Clone, Copy, Debug)]
pub struct LocalStacks {
    heads: *const usize,
    head_shift: u32,
}

impl LocalStacks {
    /// `head_shift` of stacks one cache line apart (a block of per-CPU
    /// lines of one user).
    pub const LINE: u32 = 6;
    /// `head_shift` of stacks in rows of 1 KiB (a row per CPU holding the
    /// lines of up to 16 users that share one per-CPU area, as the kmalloc
    /// caches do: a line's address is then computed from the user's index
    /// and the CPU, with no load of the user's own base).
    pub const ROW: u32 = 10;

    /// Describes the stacks: CPU `i`'s slot pointer, length and capacity at
    /// `heads + (i << head_shift)` bytes.
    ///
    /// # Safety
    /// For every CPU id of the backend this is handed to, the three words
    /// are valid and, whenever the length is at most the capacity, the slot
    /// pointer points to that many valid slots; the slot pointer and the
    /// length are written only by
    /// [`CpuLocal::pop_local`](super::CpuLocal::pop_local) /
    /// [`push_local`](super::CpuLocal::push_local) or under that CPU's
    /// guard, and the capacity only while nothing uses the description,
    /// for as long as it is used.
    #[inline(always)]
    pub const unsafe fn new(heads: *const usize, head_shift: u32) -> Self {
        Self { heads, head_shift }
    }

    /// Address of CPU 0's slot pointer (its length and capacity follow).
    #[inline(always)]
    pub fn heads(&self) -> *const usize {
        self.heads
    }

    /// log2 of the distance in bytes between two CPUs' descriptions.
    #[inline(always)]
    pub fn head_shift(&self) -> u32 {
        self.head_shift
    }

    /// Pops from CPU `cpu`'s stack of capacity `cap`, as a guard holder
    /// does (the capacity word reads 0 while the stack is stopped).
    ///
    /// # Safety
    /// The caller holds `cpu`'s guard and has stopped the stack's steps
    /// (or has exclusive use of its stacks); the description's contract
    /// holds, with capacity `cap`.
    #[inline(always)]
    pub unsafe fn pop_pinned(&self, cpu: usize, cap: usize) -> Option<usize> {
        let h = self.head(cpu);
        // SAFETY: the caller's contract: the three words are valid and ours,
        // and a length of at most the capacity means that many valid slots.
        unsafe {
            let n = (*h.add(1)).wrapping_sub(1);
            if n >= cap {
                return None;
            }
            *h.add(1) = n;
            Some(*(*h.cast::<*const usize>()).add(n))
        }
    }

    /// Pushes `value` onto CPU `cpu`'s stack of capacity `cap`, as a guard
    /// holder does.
    ///
    /// # Safety
    /// As [`pop_pinned`](Self::pop_pinned).
    #[inline(always)]
    pub unsafe fn push_pinned(&self, cpu: usize, cap: usize, value: usize) -> bool {
        let h = self.head(cpu);
        // SAFETY: as in `pop_pinned`; slot `n` is within the capacity.
        unsafe {
            let n = *h.add(1);
            if n >= cap {
                return false;
            }
            *(*h.cast::<*mut usize>()).add(n) = value;
            *h.add(1) = n + 1;
            true
        }
    }

    /// Where CPU `cpu`'s capacity word is: what a backend's
    /// [`stop_local`](super::CpuLocal::stop_local) and
    /// [`restart_local`](super::CpuLocal::restart_local) write.
    #[inline(always)]
    pub fn cap_word(&self, cpu: usize) -> *mut usize {
        self.head(cpu).wrapping_add(2)
    }

    /// CPU `cpu`'s three words.
    #[inline(always)]
    fn head(&self, cpu: usize) -> *mut usize {
        self.heads
            .cast::<u8>()
            .wrapping_add(cpu << self.head_shift)
            .cast::<usize>()
            .cast_mut()
    }
}

/// What a guard-free step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalOp {
    /// Done on CPU `cpu`'s stack; `value` is the word popped (0 for a push).
    Done {
        /// The CPU whose stack the step changed (the caller ran there at
        /// the commit; it may run elsewhere by now).
        cpu: usize,
        /// The word popped.
        value: usize,
    },
    /// Nothing done: the stack was empty (full) or stopped by a holder of
    /// the CPU's guard, or the caller's CPU has no id here. Take the slow
    /// path.
    Miss,
    /// The backend has no guard-free step (now): pin, then do it under the
    /// guard ([`LocalStacks::pop_pinned`]).
    Pin,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One CPU's description, 64 bytes apart.
    #[repr(C, align(64))]
    struct Line {
        slots: *mut usize,
        len: usize,
        cap: usize,
    }

    #[test]
    fn the_pinned_steps_follow_the_described_layout() {
        let mut slots = [0usize; 3];
        let mut lines = [
            Line {
                slots: slots.as_mut_ptr(),
                len: 0,
                cap: 3,
            },
            Line {
                slots: core::ptr::null_mut(),
                len: usize::MAX,
                cap: 3,
            },
        ];
        // SAFETY: CPU 0 has 3 slots; CPU 1's length is above its capacity.
        let s = unsafe { LocalStacks::new(lines.as_mut_ptr().cast(), 6) };
        // SAFETY: every step below: the test has the stacks to itself.
        unsafe {
            assert_eq!(s.pop_pinned(0, 3), None, "empty");
            for v in [7, 8, 9] {
                assert!(s.push_pinned(0, 3, v));
            }
            assert!(!s.push_pinned(0, 3, 10), "full");
            assert!(!s.push_pinned(1, 3, 1), "no stack takes nothing");
            assert_eq!(s.pop_pinned(1, 3), None, "nor gives");
            assert_eq!(s.pop_pinned(0, 3), Some(9));
            assert_eq!(s.cap_word(1), &raw mut lines[1].cap);
        }
        assert_eq!(lines[0].len, 2, "the length word");
        assert_eq!(slots, [7, 8, 9]);
    }
}
