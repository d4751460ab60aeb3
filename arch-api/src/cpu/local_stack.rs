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
//! [`pin`](super::CpuLocal::pin) guard, on any CPU (the step reads the
//! guard's state inside the sequence and misses while it is held).
//!
//! The default answer is [`LocalOp::Pin`]: the caller pins and does the same
//! under the guard, as before.

/// Where a front keeps one LIFO stack of `usize` words per CPU.
///
/// CPU `i`'s stack is described by two words at
/// `heads + (i << head_shift)` bytes: a pointer to its slot 0, then its
/// length (the slots being the `usize`s from slot 0 on). The step reads
/// one line and then the slot. A length above `cap` (a CPU without a
/// stack, whose slot pointer may be null) makes both steps miss, so there
/// is no separate null test. Backends' guard-free steps may handle only
/// the strides [`LINE`](Self::LINE) and [`ROW`](Self::ROW) and answer
/// [`LocalOp::Pin`] for others.
#[derive(Clone, Copy, Debug)]
pub struct LocalStacks {
    heads: *const usize,
    head_shift: u32,
    cap: usize,
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

    /// Describes the stacks: CPU `i`'s slot pointer and length at
    /// `heads + (i << head_shift)` bytes, `cap` slots per stack.
    ///
    /// # Safety
    /// For every CPU id of the backend this is handed to, the two words are
    /// valid and, whenever the length is at most `cap`, the slot pointer
    /// points to `cap` valid slots; all of it written only by
    /// [`CpuLocal::pop_local`](super::CpuLocal::pop_local) /
    /// [`push_local`](super::CpuLocal::push_local) or under that CPU's
    /// guard, for as long as the description is used.
    #[inline(always)]
    pub const unsafe fn new(heads: *const usize, head_shift: u32, cap: usize) -> Self {
        Self {
            heads,
            head_shift,
            cap,
        }
    }

    /// Address of CPU 0's slot pointer (its length follows).
    #[inline(always)]
    pub fn heads(&self) -> *const usize {
        self.heads
    }

    /// log2 of the distance in bytes between two CPUs' descriptions.
    #[inline(always)]
    pub fn head_shift(&self) -> u32 {
        self.head_shift
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
        let h = self.head(cpu);
        // SAFETY: the caller's contract: the two words are valid and ours,
        // and a length of at most `cap` means `cap` valid slots.
        unsafe {
            let n = (*h.add(1)).wrapping_sub(1);
            if n >= self.cap {
                return None;
            }
            *h.add(1) = n;
            Some(*(*h.cast::<*const usize>()).add(n))
        }
    }

    /// Pushes `value` onto CPU `cpu`'s stack, as a guard holder does.
    ///
    /// # Safety
    /// As [`pop_pinned`](Self::pop_pinned).
    #[inline(always)]
    pub unsafe fn push_pinned(&self, cpu: usize, value: usize) -> bool {
        let h = self.head(cpu);
        // SAFETY: as in `pop_pinned`; slot `n` is within `cap`.
        unsafe {
            let n = *h.add(1);
            if n >= self.cap {
                return false;
            }
            *(*h.cast::<*mut usize>()).add(n) = value;
            *h.add(1) = n + 1;
            true
        }
    }

    /// CPU `cpu`'s two words.
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

    /// One CPU's description, 64 bytes apart.
    #[repr(C, align(64))]
    struct Line {
        slots: *mut usize,
        len: usize,
    }

    #[test]
    fn the_pinned_steps_follow_the_described_layout() {
        let mut slots = [0usize; 3];
        let mut lines = [
            Line {
                slots: slots.as_mut_ptr(),
                len: 0,
            },
            Line {
                slots: core::ptr::null_mut(),
                len: usize::MAX,
            },
        ];
        // SAFETY: CPU 0 has 3 slots; CPU 1's length is above `cap`.
        let s = unsafe { LocalStacks::new(lines.as_mut_ptr().cast(), 6, 3) };
        // SAFETY: every step below: the test has the stacks to itself.
        unsafe {
            assert_eq!(s.pop_pinned(0), None, "empty");
            for v in [7, 8, 9] {
                assert!(s.push_pinned(0, v));
            }
            assert!(!s.push_pinned(0, 10), "full");
            assert!(!s.push_pinned(1, 1), "no stack takes nothing");
            assert_eq!(s.pop_pinned(1), None, "nor gives");
            assert_eq!(s.pop_pinned(0), Some(9));
        }
        assert_eq!(lines[0].len, 2, "the length word");
        assert_eq!(slots, [7, 8, 9]);
    }
}
