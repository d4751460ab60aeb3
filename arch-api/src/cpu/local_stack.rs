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
//! commit restart the step), and holders of that CPU's
//! [`pin`](super::CpuLocal::pin) guard, on any CPU (the step reads the
//! guard's state inside the sequence and misses while it is held).
//!
//! The default answer is [`LocalOp::Pin`]: the caller pins and does the same
//! under the guard, as before.

/// Where a front keeps one LIFO stack of `usize` words per CPU.
///
/// CPU `i`'s current stack is the one the pointer at
/// `heads + (i << head_shift)` points to. A stack starts with its length (a
/// `usize`); its slot `j` is the `usize` at `slots + 8 * j` bytes from its
/// start. A length above `cap` (a stand-in with no slots, say) makes both
/// steps miss, so a CPU without a stack needs no null pointer.
#[derive(Clone, Copy, Debug)]
pub struct LocalStacks {
    heads: *const *mut usize,
    head_shift: u32,
    slots: usize,
    cap: usize,
}

impl LocalStacks {
    /// Describes the stacks: CPU `i`'s head pointer at
    /// `heads + (i << head_shift)` bytes, slots from byte `slots` of each
    /// stack, `cap` slots.
    ///
    /// # Safety
    /// For every CPU id of the backend this is handed to, the head pointer
    /// is valid and points to a stack laid out as the type docs say (length
    /// word, `cap` slots if the length is at most `cap`), both written only
    /// by [`CpuLocal::pop_local`](super::CpuLocal::pop_local) /
    /// [`push_local`](super::CpuLocal::push_local) or under that CPU's
    /// guard, for as long as the description is used.
    #[inline(always)]
    pub const unsafe fn new(
        heads: *const *mut usize,
        head_shift: u32,
        slots: usize,
        cap: usize,
    ) -> Self {
        Self {
            heads,
            head_shift,
            slots,
            cap,
        }
    }

    /// Address of CPU 0's head pointer.
    #[inline(always)]
    pub fn heads(&self) -> *const *mut usize {
        self.heads
    }

    /// log2 of the distance in bytes between two CPUs' head pointers.
    #[inline(always)]
    pub fn head_shift(&self) -> u32 {
        self.head_shift
    }

    /// Byte offset of slot 0 from a stack's start.
    #[inline(always)]
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Slots per stack.
    #[inline(always)]
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Pops from CPU `cpu`'s stack, as a guard holder does.
    ///
    /// # Safety
    /// The caller holds `cpu`'s guard (or has exclusive use of its stacks);
    /// the description's contract holds.
    #[inline(always)]
    pub unsafe fn pop_pinned(&self, cpu: usize) -> Option<usize> {
        // SAFETY: the caller's contract: the head and the stack it points to
        // are valid and ours; slot `n - 1` is within `cap`.
        unsafe {
            let s = *self.head(cpu);
            let n = (*s).wrapping_sub(1);
            if n >= self.cap {
                return None;
            }
            *s = n;
            Some(*self.slot(s, n))
        }
    }

    /// Pushes `value` onto CPU `cpu`'s stack, as a guard holder does.
    ///
    /// # Safety
    /// As [`pop_pinned`](Self::pop_pinned).
    #[inline(always)]
    pub unsafe fn push_pinned(&self, cpu: usize, value: usize) -> bool {
        // SAFETY: as in `pop_pinned`; slot `n` is within `cap`.
        unsafe {
            let s = *self.head(cpu);
            let n = *s;
            if n >= self.cap {
                return false;
            }
            *self.slot(s, n) = value;
            *s = n + 1;
            true
        }
    }

    /// CPU `cpu`'s head pointer.
    #[inline(always)]
    fn head(&self, cpu: usize) -> *mut *mut usize {
        self.heads
            .cast::<u8>()
            .wrapping_add(cpu << self.head_shift)
            .cast::<*mut usize>()
            .cast_mut()
    }

    /// Slot `j` of stack `s`.
    #[inline(always)]
    fn slot(&self, s: *mut usize, j: usize) -> *mut usize {
        s.cast::<u8>()
            .wrapping_add(self.slots)
            .cast::<usize>()
            .wrapping_add(j)
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
    /// Nothing done: the stack was empty (full), or the CPU's guard was
    /// held, or the caller's CPU has no id here. Take the slow path.
    Miss,
    /// The backend has no guard-free step (now): pin, then do it under the
    /// guard ([`LocalStacks::pop_pinned`]).
    Pin,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two CPUs' heads 64 bytes apart; stacks of 3 slots after a two-word
    /// header (the sheaves' layout).
    #[repr(C, align(64))]
    struct Head(*mut usize);

    #[test]
    fn the_pinned_steps_follow_the_described_layout() {
        let mut a = [0usize; 5];
        let mut b = [usize::MAX, 0, 0, 0, 0];
        let heads = [Head(a.as_mut_ptr()), Head(b.as_mut_ptr())];
        // SAFETY: each head points to a length word, a spare word and 3
        // slots, alive for the test.
        let s = unsafe { LocalStacks::new(heads.as_ptr().cast(), 6, 16, 3) };
        // SAFETY (every step below): the test has the stacks to itself.
        unsafe {
            assert_eq!(s.pop_pinned(0), None, "empty");
            for v in [7, 8, 9] {
                assert!(s.push_pinned(0, v));
            }
            assert!(!s.push_pinned(0, 10), "full");
            assert!(!s.push_pinned(1, 1), "a stand-in takes nothing");
            assert_eq!(s.pop_pinned(1), None, "nor gives");
            assert_eq!(s.pop_pinned(0), Some(9));
        }
        assert_eq!(a, [2, 0, 7, 8, 9], "length word, header, slots");
    }
}
