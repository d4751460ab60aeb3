//! [`CpuLocal::pop_local`](crate::CpuLocal::pop_local) /
//! [`push_local`](crate::CpuLocal::push_local) as rseq critical sections
//! (x86_64, glibc's rseq area; tcmalloc's per-CPU caches work this way),
//! and [`stop_local`](crate::CpuLocal::stop_local)'s fence.
//!
//! One section reads the thread's `cpu_id`, loads the CPU's capacity,
//! length and slot pointer (one line, the capacity first), and commits with
//! one store of the new length (a push writes its slot first: above the old
//! length, so an aborted push leaves nothing behind). Preemption, migration
//! or a signal before the commit aborts the section, which then misses (the
//! caller's slow path runs).
//!
//! The sections do not read the CPU's lock: a holder of it that touches a
//! stack stops the stack first, storing 0 into its capacity, and stores the
//! capacity back when done. The stop is fenced against a section in
//! flight on that CPU that read the old capacity: if the holder runs on
//! that CPU, the store is itself the commit of a section there
//! ([`stop`]), so the other section was preempted and aborts; from
//! anywhere else, `membarrier(PRIVATE_EXPEDITED_RSEQ)` aimed at the CPU
//! follows the store (`rseq.rs`) and aborts it, or it committed before.
//! After the fence every section reads 0 and misses. Reading the capacity
//! before the length and slot pointer matters for the restart: x86
//! loads are not reordered with older loads, and the holder stores the
//! capacity after its changes, so a section that reads the restored
//! capacity reads the holder's length and slot pointer too.
//!
//! The sections index the stacks' descriptions by `id << 6`
//! ([`LocalStacks::LINE`]) or `id << 10` ([`LocalStacks::ROW`]):
//! descriptions on other strides get [`LocalOp::Pin`].

use crate::cpu::{LocalOp, LocalStacks};
use core::sync::atomic::Ordering;

/// Whether the sections handle `stacks`' stride.
#[inline(always)]
pub(super) fn handles(stacks: &LocalStacks) -> bool {
    matches!(stacks.head_shift(), LocalStacks::LINE | LocalStacks::ROW)
}

/// The sections' common start: the caller's CPU id in `id` (out to the
/// miss stub if it is at or above `nr`, which `{n}` holds on entry), `tmp`
/// at its stack's description (the heads' base, in `{h}` on entry), then
/// `h` its capacity and `n` its length. `$shift` is the stride's log2
/// ([`LocalStacks::LINE`] or [`LocalStacks::ROW`]). The miss stub sets
/// `id` to `usize::MAX`, so `id != usize::MAX` alone says the section
/// committed, and the fast path needs no status register.
///
/// `nr` and the heads' base are read once, at the start, so their
/// registers serve as `n` and `h` afterwards: five registers in all (six
/// for a push), which leaves a caller's `malloc` caller-saved ones for what
/// it keeps across the section, and so no stack frame (BENCHMARKS.md,
/// sessions 19 and 20). The price: an abort cannot restart the section
/// (its inputs are gone), so it takes the miss stub, and the caller's slow
/// path runs instead.
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
macro_rules! rseq_stack_line {
    ($shift:literal) => {
        concat!(
            "mov {id:e}, dword ptr fs:[{off} + 4]\n",
            "cmp {id}, {n}\n",
            "jae 6f\n",
            "mov {tmp}, {id}\n",
            "shl {tmp}, ",
            $shift,
            "\n",
            "add {tmp}, {h}\n",
            "mov {h}, qword ptr [{tmp} + 16]\n",
            "mov {n}, qword ptr [{tmp} + 8]",
        )
    };
}

/// The pop section. `$shift` is as in [`rseq_stack_line!`]; `$window` is
/// extra code between the load of the word and the commit, with `$extra`
/// its operands (empty except in the unit tests, which widen it).
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
macro_rules! rseq_pop {
    ($nr:expr, $stacks:expr, $shift:literal, $window:literal $(, ($($extra:tt)*))?) => {{
        let s: &LocalStacks = $stacks;
        let id: usize;
        let v: usize;
        // SAFETY: the callers (`pop`, the tests) pass stacks under
        // `LocalStacks::new`'s contract for ids below `$nr` at the stride
        // `$shift`; `__rseq_offset` locates the
        // thread's rseq area (registered after `active()`; with `$nr` 0,
        // maybe not, and nothing past `cpu_id` is read). The section
        // writes only a stack's length word and the area's `rseq_cs`.
        unsafe {
            rseq_section!(
                [
                    rseq_stack_line!($shift),
                    "sub {n}, 1",
                    "cmp {n}, {h}",
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

/// The push section (`$shift`, `$window` and `$extra` as in `rseq_pop!`).
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
macro_rules! rseq_push {
    ($nr:expr, $stacks:expr, $value:expr, $shift:literal, $window:literal $(, ($($extra:tt)*))?) => {{
        let s: &LocalStacks = $stacks;
        let id: usize;
        // SAFETY: as in `rseq_pop!`; the section also writes the slot at
        // the stack's length, which no one reads before a commit.
        unsafe {
            rseq_section!(
                [
                    rseq_stack_line!($shift),
                    "cmp {n}, {h}",
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
/// from the miss stub: a miss (the stack empty, full or stopped, or no
/// usable `cpu_id` below `nr`, which the caller's guard path handles by
/// `sched_getcpu()`'s lock taken the remote way).
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
/// `nr` is 0, or `super::rseq::active()` answered `true`; `stacks` is
/// valid for ids below `nr`, at a stride the sections [`handles`]. With
/// `nr` 0 the section only arms (and disarms) the thread's rseq area and
/// misses: glibc (2.35 and later, which `__rseq_offset` needs) keeps that
/// area in every thread, registered or not, and an unregistered one reads
/// `cpu_id` -2 (`RSEQ_CPU_ID_REGISTRATION_FAILED`), above any `nr`.
#[inline(always)]
pub(super) unsafe fn pop(nr: usize, stacks: &LocalStacks) -> LocalOp {
    debug_assert!(handles(stacks));
    #[cfg(all(target_arch = "x86_64", target_env = "gnu", not(miri)))]
    {
        let (id, v) = if stacks.head_shift() == LocalStacks::LINE {
            rseq_pop!(nr, stacks, "6", "")
        } else {
            rseq_pop!(nr, stacks, "10", "")
        };
        return classify(id, v);
    }
    #[allow(unreachable_code)]
    {
        let _ = (nr, stacks);
        LocalOp::Pin
    }
}

/// Pushes onto the caller's CPU's stack by an rseq section.
///
/// # Safety
/// As [`pop`].
#[inline(always)]
pub(super) unsafe fn push(nr: usize, stacks: &LocalStacks, value: usize) -> LocalOp {
    debug_assert!(handles(stacks));
    #[cfg(all(target_arch = "x86_64", target_env = "gnu", not(miri)))]
    {
        let id = if stacks.head_shift() == LocalStacks::LINE {
            rseq_push!(nr, stacks, value, "6", "")
        } else {
            rseq_push!(nr, stacks, value, "10", "")
        };
        return classify(id, 0);
    }
    #[allow(unreachable_code)]
    {
        let _ = (nr, stacks, value);
        LocalOp::Pin
    }
}

/// Stops the steps on CPU `cpu`'s stack whose capacity word is `word`:
/// stores 0 there as the commit of a section on `cpu` when the caller runs
/// there (a section of another thread on `cpu` was preempted by us and
/// aborts), else stores it and fences `cpu` with `membarrier`. With
/// `fenced` false (the tests' broken variant) the fence is left out.
///
/// # Safety
/// `word` is a live capacity word of the stacks the sections are given,
/// written by nothing else now (the caller holds `cpu`'s guard); rseq is
/// `active()`.
pub(super) unsafe fn stop(cpu: usize, word: *mut usize, fenced: bool) {
    #[cfg(all(target_arch = "x86_64", target_env = "gnu", not(miri)))]
    {
        let id: usize;
        // SAFETY: the caller's contract; the section writes only `word` and
        // the area's `rseq_cs`. Its body changes no input, so an abort
        // restarts it.
        unsafe {
            rseq_section!(
                [
                    "mov {id:e}, dword ptr fs:[{off} + 4]",
                    "cmp {id}, {cpu}",
                    "jne 6f",
                    "mov qword ptr [{word}], 0",
                ],
                "mov {id}, -1",
                "2b",
                off = in(reg) super::__rseq_offset,
                cpu = in(reg) cpu,
                word = in(reg) word,
                id = out(reg) id,
                tmp = out(reg) _,
                options(nostack),
            );
        }
        if id != usize::MAX {
            return;
        }
    }
    // SAFETY: the caller's contract (a live, aligned word); the fence's
    // syscall is a full barrier after it.
    unsafe { core::sync::atomic::AtomicUsize::from_ptr(word) }.store(0, Ordering::SeqCst);
    if fenced {
        super::rseq::fence(cpu);
    }
}

#[cfg(all(test, target_arch = "x86_64", target_env = "gnu"))]
#[path = "rseq_stack_tests.rs"]
mod tests;
