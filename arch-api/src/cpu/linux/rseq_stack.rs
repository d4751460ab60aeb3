//! [`CpuLocal::pop_local`](crate::CpuLocal::pop_local) /
//! [`push_local`](crate::CpuLocal::push_local) as rseq critical sections
//! (x86_64, glibc's rseq area; tcmalloc's per-CPU caches work this way).
//!
//! One section reads the thread's `cpu_id`, tests that CPU's lock (a guard
//! holder, local or remote, makes it miss), loads the CPU's slot pointer
//! and length (one line), and commits with one store of the new length (a push writes its
//! slot first: above the old length, so an aborted push leaves nothing
//! behind). Preemption, migration or a signal before the commit aborts
//! the section, which then misses (the caller's slow path runs). A remote
//! taker of the CPU's lock fences the CPU with `membarrier` after writing
//! its ticket (`rseq.rs`), so a section that read the lock free has either
//! committed by then or aborts and misses:
//! the same argument as the lock's own section, with the pop or push as the
//! commit instead of the lock word. Neither step writes the lock, so a
//! remote taker's read-back is unaffected.
//!
//! The sections index the locks by `id << 6` and the stacks' descriptions
//! by `id << 6` ([`LocalStacks::LINE`]) or `id << 10`
//! ([`LocalStacks::ROW`]): descriptions on other strides get
//! [`LocalOp::Pin`].

use super::CpuLock;
use crate::cpu::{LocalOp, LocalStacks};

/// The sections' extra shift (after the locks' `<< 6`) for row strides.
const _: () = assert!(LocalStacks::LINE == 6 && LocalStacks::ROW == 6 + 4);

/// Whether the sections handle `stacks`' stride.
#[inline(always)]
pub(super) fn handles(stacks: &LocalStacks) -> bool {
    matches!(stacks.head_shift(), LocalStacks::LINE | LocalStacks::ROW)
}

/// The sections' common start: the caller's CPU id in `id` (out to the
/// miss stub if it is at or above `nr`, which `{n}` holds on entry), that
/// CPU's lock tested (the miss stub if held), `tmp` at its stack's
/// description (the heads' base, in `{h}` on entry) and `n` its length.
/// `$row` is empty for descriptions a line apart, or the extra shift for
/// rows. The miss stub sets `id` to `usize::MAX`, so `id != usize::MAX`
/// alone says the section committed, and the fast path needs no status
/// register.
///
/// `nr` and the heads' base are read once, at the start, so their
/// registers serve as `n` and `h` afterwards: seven registers in all, which
/// leaves a caller's `malloc` two caller-saved ones for what it keeps
/// across the section, and so no stack frame (BENCHMARKS.md, session 19).
/// The price: an abort cannot restart the section (its inputs are gone),
/// so it takes the miss stub, and the caller's slow path runs instead.
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
macro_rules! rseq_stack_line {
    ($row:literal) => {
        concat!(
            "mov {id:e}, dword ptr fs:[{off} + 4]\n",
            "cmp {id}, {n}\n",
            "jae 6f\n",
            "mov {tmp}, {id}\n",
            "shl {tmp}, 6\n",
            "cmp dword ptr [{locks} + {tmp}], 0\n",
            "jne 6f\n",
            $row,
            "add {tmp}, {h}\n",
            "mov {n}, qword ptr [{tmp} + 8]",
        )
    };
}

/// The pop section. `$row` is as in [`rseq_stack_line!`]; `$window` is
/// extra code between the load of the word and the commit, with `$extra`
/// its operands (empty except in the unit tests, which widen it).
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
macro_rules! rseq_pop {
    ($locks:expr, $nr:expr, $stacks:expr, $row:literal, $window:literal $(, ($($extra:tt)*))?) => {{
        let s: &LocalStacks = $stacks;
        let id: usize;
        let v: usize;
        // SAFETY: the callers (`pop`, the tests) pass `$locks` pointing to
        // `$nr` 64-byte `CpuLock`s and stacks under `LocalStacks::new`'s
        // contract at the stride `$row` is for; `__rseq_offset` locates the
        // thread's rseq area (registered after `active()`; with `$nr` 0,
        // maybe not, and nothing past `cpu_id` is read). The section
        // writes only a stack's length word and the area's `rseq_cs`.
        unsafe {
            rseq_section!(
                [
                    rseq_stack_line!($row),
                    "sub {n}, 1",
                    "cmp {n}, {cap}",
                    "jae 6f",
                    "mov {h}, qword ptr [{tmp}]",
                    "mov {h}, qword ptr [{h} + {n} * 8]",
                    $window,
                    "mov qword ptr [{tmp} + 8], {n}",
                ],
                "mov {id}, -1",
                // An abort misses: `n` and `h` no longer hold `nr` and the
                // heads' base, so the section cannot restart.
                "6f",
                off = in(reg) $crate::cpu::linux::__rseq_offset,
                locks = in(reg) $locks,
                cap = in(reg) s.cap(),
                // The heads' base in, the popped word out.
                h = inout(reg) s.heads() => v,
                // `nr` in, then the stack's length.
                n = inout(reg) $nr => _,
                id = out(reg) id,
                tmp = out(reg) _,
                $($($extra)*)?
                options(nostack),
            );
        }
        (id, v)
    }};
}

/// The push section (`$row`, `$window` and `$extra` as in `rseq_pop!`).
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
macro_rules! rseq_push {
    ($locks:expr, $nr:expr, $stacks:expr, $value:expr, $row:literal, $window:literal $(, ($($extra:tt)*))?) => {{
        let s: &LocalStacks = $stacks;
        let id: usize;
        // SAFETY: as in `rseq_pop!`; the section also writes the slot at
        // the stack's length, which no one reads before a commit.
        unsafe {
            rseq_section!(
                [
                    rseq_stack_line!($row),
                    "cmp {n}, {cap}",
                    "jae 6f",
                    "mov {h}, qword ptr [{tmp}]",
                    "mov qword ptr [{h} + {n} * 8], {val}",
                    "add {n}, 1",
                    $window,
                    "mov qword ptr [{tmp} + 8], {n}",
                ],
                "mov {id}, -1",
                // An abort misses: `n` and `h` no longer hold `nr` and the
                // heads' base, so the section cannot restart.
                "6f",
                off = in(reg) $crate::cpu::linux::__rseq_offset,
                locks = in(reg) $locks,
                cap = in(reg) s.cap(),
                val = in(reg) $value,
                // As in `rseq_pop!`.
                h = inout(reg) s.heads() => _,
                n = inout(reg) $nr => _,
                id = out(reg) id,
                tmp = out(reg) _,
                $($($extra)*)?
                options(nostack),
            );
        }
        id
    }};
}

/// What a section's `id` says: committed on CPU `id`, or `usize::MAX`
/// from the miss stub: a miss (the stack empty or full, the CPU's lock
/// held, or no usable `cpu_id` below `nr`, which the caller's guard path
/// handles by `sched_getcpu()`'s lock taken the remote way).
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
#[inline(always)]
fn classify(id: usize, value: usize) -> LocalOp {
    if id != usize::MAX {
        LocalOp::Done { cpu: id, value }
    } else {
        LocalOp::Miss
    }
}

/// Pops from the caller's CPU's stack by an rseq section.
///
/// # Safety
/// `nr` is 0, or `super::rseq::active()` answered `true` and `locks` has
/// at least `nr` entries; `stacks` is valid for ids below `nr`, at a
/// stride the sections [`handles`]. With `nr` 0 the section only arms and
/// disarms the thread's rseq area and misses: glibc (2.35 and later, which
/// `__rseq_offset` needs) keeps that area in every thread, registered or
/// not, and an unregistered one reads `cpu_id` -2
/// (`RSEQ_CPU_ID_REGISTRATION_FAILED`), above any `nr`.
#[inline(always)]
pub(super) unsafe fn pop(locks: &[CpuLock], nr: usize, stacks: &LocalStacks) -> LocalOp {
    debug_assert!(locks.len() >= nr && handles(stacks));
    #[cfg(all(target_arch = "x86_64", target_env = "gnu", not(miri)))]
    {
        let (id, v) = if stacks.head_shift() == LocalStacks::LINE {
            rseq_pop!(locks.as_ptr(), nr, stacks, "", "")
        } else {
            rseq_pop!(locks.as_ptr(), nr, stacks, "shl {tmp}, 4\n", "")
        };
        return classify(id, v);
    }
    #[allow(unreachable_code)]
    {
        let _ = (locks, nr, stacks);
        LocalOp::Pin
    }
}

/// Pushes onto the caller's CPU's stack by an rseq section.
///
/// # Safety
/// As [`pop`].
#[inline(always)]
pub(super) unsafe fn push(
    locks: &[CpuLock],
    nr: usize,
    stacks: &LocalStacks,
    value: usize,
) -> LocalOp {
    debug_assert!(locks.len() >= nr && handles(stacks));
    #[cfg(all(target_arch = "x86_64", target_env = "gnu", not(miri)))]
    {
        let id = if stacks.head_shift() == LocalStacks::LINE {
            rseq_push!(locks.as_ptr(), nr, stacks, value, "", "")
        } else {
            rseq_push!(locks.as_ptr(), nr, stacks, value, "shl {tmp}, 4\n", "")
        };
        return classify(id, 0);
    }
    #[allow(unreachable_code)]
    {
        let _ = (locks, nr, stacks, value);
        LocalOp::Pin
    }
}

#[cfg(all(test, target_arch = "x86_64", target_env = "gnu"))]
#[path = "rseq_stack_tests.rs"]
mod tests;
