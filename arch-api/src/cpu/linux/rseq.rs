//! The per-CPU try-lock without a LOCKed instruction: an rseq critical
//! section (x86_64, glibc 2.35+ with its rseq area registered).
//!
//! User space cannot turn preemption off, so [`LinuxCpus`](super::LinuxCpus)
//! excludes with a lock per CPU. Taking it with `lock cmpxchg` was 36-40 %
//! of `malloc`'s and `free`'s samples in kmm-malloc (BENCHMARKS.md, issue
//! 18). A restartable sequence takes it with a plain store instead: the
//! section reads the thread's `cpu_id` from the rseq area, tests that CPU's
//! lock and commits by storing `LOCAL` into it. If the thread is preempted,
//! migrated or signalled before the commit, the kernel restarts the section
//! at its abort handler, so the test and the store run on one CPU with
//! nothing of this process in between (the kernel's rseq ABI,
//! `include/uapi/linux/rseq.h`; Desnoyers, "Restartable sequences", 2016).
//!
//! That excludes only code on the same CPU. A thread taking *another*
//! CPU's lock (`try_pin_id`: `fork`'s prepare handler) compare-exchanges
//! in a ticket of its own (a 32-bit value, never `FREE` or `LOCAL`), then
//! runs `membarrier(PRIVATE_EXPEDITED_RSEQ)` aimed at that CPU: the IPI
//! restarts any section running there, so a section that read the lock
//! free before the exchange either committed already (its `LOCAL`
//! overwrote the ticket: the remote taker reads that back and gives up) or
//! restarts and finds the ticket. The value read back is the reader's own
//! only if no one else took the lock in between, so remote takers need no
//! lock among themselves.
//!
//! The mode is decided once per process ([`active`]): rseq registered by
//! glibc for the first thread that asks, a usable `cpu_id`, and the
//! membarrier command registered. Otherwise (another libc, valgrind, the
//! glibc tunable `glibc.pthread.rseq=0`, another architecture) every taker
//! uses the compare-exchange and no fence is needed.

use super::CpuLock;
#[cfg(all(test, target_arch = "x86_64", target_env = "gnu"))]
use core::sync::atomic::AtomicU64;
use core::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// Lock values: free, taken by a thread on that CPU (rseq commit); any
/// other value is a remote taker's ticket (compare-exchange, then fence).
pub(super) const FREE: u32 = 0;
pub(super) const LOCAL: u32 = 1;

const UNKNOWN: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The next remote taker's ticket.
static TICKET: AtomicU32 = AtomicU32::new(2);

fn ticket() -> u32 {
    loop {
        let t = TICKET.fetch_add(1, Ordering::Relaxed);
        // After 2^32 takes the counter wraps: skip FREE and LOCAL.
        if t > LOCAL {
            return t;
        }
    }
}

// `linux/membarrier.h`.
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_int = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_int = 1 << 8;
const MEMBARRIER_CMD_FLAG_CPU: libc::c_uint = 1;

fn membarrier(cmd: libc::c_int, flags: libc::c_uint, cpu: libc::c_int) -> bool {
    // SAFETY: a syscall with integer arguments; no memory is passed.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, flags, cpu) == 0 }
}

/// Whether the locks are taken by rseq sections in this process (decided
/// by the first call; the same answer for every thread after it).
#[inline]
pub(super) fn active() -> bool {
    match MODE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => decide(),
    }
}

#[cold]
fn decide() -> bool {
    let on = supported()
        && super::rseq_cpu().is_some()
        && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0);
    // Racing first callers compute the same answer; the first store wins.
    let _ = MODE.compare_exchange(
        UNKNOWN,
        if on { ON } else { OFF },
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    MODE.load(Ordering::Relaxed) == ON
}

/// The architectures with a section below, under glibc's area. glibc
/// exports the area's feature size: 20 or more whenever it registered one
/// (the fields used, `cpu_id` at 4 and `rseq_cs` at 8, are in the first
/// 16 bytes).
fn supported() -> bool {
    #[cfg(all(target_arch = "x86_64", target_env = "gnu", not(miri)))]
    {
        // SAFETY: glibc's start-up constant, read-only afterwards.
        (unsafe { super::__rseq_size }) >= 20
    }
    #[cfg(not(all(target_arch = "x86_64", target_env = "gnu", not(miri))))]
    false
}

/// What a local attempt found.
#[cfg_attr(
    not(all(target_arch = "x86_64", target_env = "gnu", not(miri))),
    allow(dead_code)
)]
pub(super) enum Local {
    /// The lock of CPU `id` (the caller's CPU at the commit) is ours.
    Taken(usize),
    /// CPU `id`'s lock is held.
    Busy(usize),
    /// The thread has no usable `cpu_id` (not registered), or an id at or
    /// above `nr`: take the remote path.
    NoCpu,
}

/// The store that disarms a section after it ends. The descriptor lives in
/// this object's image, which may be unmapped later (a `dlclose`d library),
/// and the ABI asks user space to clear the pointer before that. With the
/// feature `rseq-resident` (an image that is never unloaded) the sections
/// leave it armed, as tcmalloc's and librseq's do: the kernel clears it
/// the next time it preempts the thread outside the section, and every
/// section saves a store (about 1 % of `malloc-bench`'s alloc-test;
/// BENCHMARKS.md, session 20).
#[cfg(all(
    target_arch = "x86_64",
    target_env = "gnu",
    not(feature = "rseq-resident")
))]
macro_rules! rseq_disarm {
    () => {
        "mov qword ptr fs:[{off} + 8], 0"
    };
}
#[cfg(all(target_arch = "x86_64", target_env = "gnu", feature = "rseq-resident"))]
macro_rules! rseq_disarm {
    () => {
        ""
    };
}

/// An rseq critical section around `$body`: the code from the section's
/// start to its commit, whose last instruction is the commit (one store).
/// The body jumps to `4f` to leave without committing, or to `6f`, a stub
/// out of line that runs `$miss` (an instruction) first; the section ends
/// at `4:`. On an abort (preemption, migration, a signal) the kernel
/// sends the thread to `$abort`: `"2b"` restarts the section, which suits
/// a body that changes no input register; `"6f"` takes the miss stub, for
/// a body that reuses its inputs' registers (a restart would read them
/// changed). `$ops` are the operands, which must include `off` (the rseq
/// area's offset) and a scratch `tmp`.
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
macro_rules! rseq_section {
    ([$($body:expr),* $(,)?], $miss:literal, $abort:literal, $($ops:tt)*) => {
        core::arch::asm!(
            // Arm the section (again after an abort: the kernel clears
            // `rseq_cs` when it restarts one).
            "2:",
            "lea {tmp}, [rip + 5f]",
            "mov qword ptr fs:[{off} + 8], {tmp}",
            "3:",
            $($body,)*
            "4:",
            // Out of line (as librseq does), so that the fast path runs
            // straight through: the signature glibc registered (RSEQ_SIG
            // on x86_64) as the operand of a `ud1` right before the abort
            // handler, and the miss stub.
            ".pushsection __rseq_failure, \"ax\"",
            ".byte 0x0f, 0xb9, 0x3d",
            ".long 0x53053053",
            "8:",
            concat!("jmp ", $abort),
            "6:",
            $miss,
            "jmp 4b",
            ".popsection",
            rseq_disarm!(),
            // `struct rseq_cs`: version, flags, start_ip,
            // post_commit_offset, abort_ip.
            ".pushsection __rseq_cs, \"aw\"",
            ".balign 32",
            "5:",
            ".long 0, 0",
            ".quad 3b, 4b - 3b, 8b",
            ".popsection",
            $($ops)*
        )
    };
}

/// The rseq section: test the caller's CPU's lock and commit `LOCAL`.
/// `$window` is extra code between the test and the commit (empty except
/// in the unit tests, which widen the window to show the fence matters).
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
macro_rules! rseq_try_lock {
    ($locks:expr, $nr:expr, $window:literal) => {{
        let id: usize;
        let busy: usize;
        // SAFETY: the callers (`try_local`, the tests) pass `$locks`
        // pointing to `$nr` 64-byte `CpuLock`s and run only after
        // `active()`, so `__rseq_offset` locates the thread's registered
        // area. The section writes only `locks[id].0` and the area's
        // `rseq_cs` word, which the ABI gives to the thread.
        unsafe {
            rseq_section!(
                [
                    "mov {id:e}, dword ptr fs:[{off} + 4]",
                    "xor {busy:e}, {busy:e}",
                    "cmp {id}, {nr}",
                    "jae 4f",
                    "mov {busy:e}, 1",
                    "mov {tmp}, {id}",
                    "shl {tmp}, 6",
                    "add {tmp}, {locks}",
                    "cmp dword ptr [{tmp}], 0",
                    "jne 4f",
                    $window,
                    "xor {busy:e}, {busy:e}",
                    "mov dword ptr [{tmp}], 1",
                ],
                "",
                "2b",
                off = in(reg) $crate::cpu::linux::__rseq_offset,
                locks = in(reg) $locks,
                nr = in(reg) $nr,
                id = out(reg) id,
                busy = out(reg) busy,
                tmp = out(reg) _,
                options(nostack),
            );
        }
        (id, busy)
    }};
}

/// One attempt at the caller's CPU's lock by an rseq section (restarted,
/// not failed, on preemption or migration).
///
/// # Safety
/// [`active`] answered `true`; `locks` has at least `nr` entries.
#[inline(always)]
pub(super) unsafe fn try_local(locks: &[CpuLock], nr: usize) -> Local {
    debug_assert!(locks.len() >= nr && nr <= super::MAX_LINUX_CPUS);
    #[cfg(all(target_arch = "x86_64", target_env = "gnu", not(miri)))]
    {
        let (id, busy) = rseq_try_lock!(locks.as_ptr(), nr, "");
        return classify(id, busy, nr);
    }
    #[allow(unreachable_code)]
    {
        let _ = (locks, nr);
        Local::NoCpu
    }
}

#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
#[inline(always)]
fn classify(id: usize, busy: usize, nr: usize) -> Local {
    if id >= nr {
        Local::NoCpu
    } else if busy != 0 {
        Local::Busy(id)
    } else {
        Local::Taken(id)
    }
}

/// Takes `lock` (CPU `id`'s) from any CPU: exchange in a ticket, fence
/// that CPU, read back. `false` if it is held, or a local section's commit
/// won. Never waits (a signal handler may call it).
pub(super) fn try_remote(lock: &CpuLock, id: usize) -> bool {
    try_remote_fenced(lock, id, true)
}

/// `fenced = false` is the unit tests' broken variant.
#[inline]
fn try_remote_fenced(lock: &CpuLock, id: usize, fenced: bool) -> bool {
    if lock.0.load(Ordering::Relaxed) != FREE {
        return false;
    }
    let me = ticket();
    if lock
        .0
        .compare_exchange(FREE, me, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    if !fenced {
        return true;
    }
    fence(id);
    // A section that read FREE before our exchange and committed before
    // the IPI wrote LOCAL over our ticket: it holds the lock (and any
    // later taker wrote its own value, never ours).
    lock.0.load(Ordering::Acquire) == me
}

/// Restarts any rseq section running on CPU `id` and orders memory with
/// it. Registration is per process and survives `fork`; if the kernel
/// forgot it anyway, register and try again.
pub(super) fn fence(id: usize) {
    let cpu = id as libc::c_int;
    if membarrier(
        MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ,
        MEMBARRIER_CMD_FLAG_CPU,
        cpu,
    ) {
        return;
    }
    if membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0)
        && membarrier(
            MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ,
            MEMBARRIER_CMD_FLAG_CPU,
            cpu,
        )
    {
        return;
    }
    // Without the fence a local section could hold the lock with us:
    // refusing to go on is the only safe answer.
    let msg = b"arch-api LinuxCpus: membarrier(PRIVATE_EXPEDITED_RSEQ) failed; aborting\n";
    // SAFETY: writes a static buffer to stderr; `abort` does not return.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}

/// Checks what a section left in the thread's `rseq_cs` word (what the
/// kernel follows on the next preemption): nothing, or with
/// `rseq-resident` nothing or one of this image's descriptors (the
/// linker's bounds of their section).
#[cfg(all(test, target_arch = "x86_64", target_env = "gnu"))]
#[track_caller]
pub(super) fn assert_disarmed() {
    let cs = armed_descriptor();
    if cfg!(feature = "rseq-resident") {
        unsafe extern "C" {
            static __start___rseq_cs: u8;
            static __stop___rseq_cs: u8;
        }
        // The addresses only: GNU ld defines both for a section named as a
        // C identifier, which holds this image's descriptors.
        let (lo, hi) = (
            &raw const __start___rseq_cs as u64,
            &raw const __stop___rseq_cs as u64,
        );
        assert!(
            cs == 0 || (lo..hi).contains(&cs),
            "rseq_cs {cs:#x} is not one of this image's descriptors"
        );
    } else {
        assert_eq!(cs, 0, "a section left its descriptor armed");
    }
}

/// The thread's `rseq_cs` word.
#[cfg(all(test, target_arch = "x86_64", target_env = "gnu"))]
fn armed_descriptor() -> u64 {
    let tp: usize;
    // SAFETY: reads the thread pointer register.
    unsafe { core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly)) };
    // SAFETY: `active()`: glibc's registered area is at this offset.
    unsafe { ((tp as isize + super::__rseq_offset + 8) as *const u64).read_volatile() }
}

/// The sections' tests' remote taker: takes random CPUs' locks of
/// `locks` (with the fence, or the broken variant without) until `taken`
/// reaches `takes` or after a million tries; `held(id)` runs with CPU
/// `id`'s lock held and releases it.
#[cfg(all(test, target_arch = "x86_64", target_env = "gnu"))]
pub(super) fn remote_taker(
    seed: u64,
    locks: &[CpuLock],
    fenced: bool,
    taken: &AtomicU64,
    takes: u64,
    mut held: impl FnMut(usize),
) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ seed;
    for tries in 0..1_000_000u32 {
        if taken.load(Ordering::Relaxed) >= takes {
            break;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let id = (x as usize) % locks.len();
        if try_remote_fenced(&locks[id], id, fenced) {
            taken.fetch_add(1, Ordering::Relaxed);
            held(id);
        } else if tries % 256 == 255 {
            // A local holder preempted on this CPU: let it run and release.
            std::thread::yield_now();
        }
    }
}

#[cfg(all(test, target_arch = "x86_64", target_env = "gnu"))]
#[path = "rseq_tests.rs"]
mod tests;
