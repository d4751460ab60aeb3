//! Real CPUs (feature `std`, Linux): the CPU id is the CPU the calling
//! thread runs on at this instant, and the kernel's scheduler preempts and
//! migrates threads at any instruction, exactly story 3's situation.
//!
//! * [`current_cpu`](CpuLocal::current_cpu) reads the `cpu_id` field of the
//!   thread's `rseq` area, which glibc (2.35 and later) registers for every
//!   thread: one thread-pointer-relative load. Where the area is not
//!   registered (glibc tunable `glibc.pthread.rseq=0`, a thread not yet
//!   started, another libc) it falls back to `sched_getcpu()` (the vDSO
//!   `getcpu`). BENCHMARKS.md records what each costs.
//! * Per-CPU state is sized by the machine's *possible* CPUs
//!   (`/sys/devices/system/cpu/possible`), so a CPU brought online later
//!   still has its slot.
//! * Nothing keeps a thread on its CPU, so [`pin`](CpuLocal::pin)'s guard is
//!   a per-CPU lock (Linux's `local_lock` taken by a task that may be
//!   migrated while holding it): the id it answers is the one whose lock it
//!   holds, and no other thread runs a pinned section on that id meanwhile.
//!   [`try_pin`](CpuLocal::try_pin) is `local_trylock`: it fails instead of
//!   waiting when the lock is held (its holder was preempted or migrated
//!   inside its section), so the sheaves front can fall back to the slab
//!   layer rather than wait for a descheduled holder.
//! * On x86_64 with glibc's rseq area the caller's own CPU's lock is taken
//!   by a restartable sequence, a plain store and no LOCKed instruction;
//!   another CPU's lock ([`try_pin_id`](LinuxCpus::try_pin_id)) by a
//!   compare-exchange and a `membarrier` fence aimed at that CPU. Elsewhere
//!   every lock is taken by compare-exchange. [`LinuxCpus::uses_rseq`]
//!   says which; the `rseq` module explains why it is sound.
//! * In that rseq mode [`pop_local`](CpuLocal::pop_local) and
//!   [`push_local`](CpuLocal::push_local) are rseq sections too: the pop
//!   or push itself is the commit, and they read nothing but the stack's
//!   own line (a holder of the CPU's lock stops a stack before it touches
//!   it: [`stop_local`](CpuLocal::stop_local)), so a `malloc` that hits
//!   its CPU's sheaf neither writes nor reads a lock (module
//!   `rseq_stack`). Outside it the same sections miss at once, and the
//!   caller pins.
//! * `OWNER_ONLY_WRITES = false`: the tid fast path uses the SMP DW-CAS; a
//!   thread migrated between reading the tid and the CAS fails the CAS and
//!   retries.
//!
//! No allocation, no thread-local destructor, no lock other than its own:
//! usable by a `malloc` before thread-locals exist and during thread exit.
//!
//! ```no_run
//! use arch_api::{CpuLocal, LinuxCpus};
//! let cpus = LinuxCpus::new();
//! let id = cpus.current_cpu().unwrap();
//! assert!(id < cpus.nr_cpus());
//! let (guard, pinned) = cpus.pin();
//! assert!(cpus.try_pin_id(pinned).is_none(), "the CPU's lock is held");
//! drop(guard);
//! ```

use super::CpuLocal;
use core::sync::atomic::{AtomicU32, Ordering};

#[macro_use]
mod rseq;
mod rseq_stack;
use crate::cpu::{LocalOp, LocalStacks};
use rseq::Local;

/// Most CPUs a [`LinuxCpus`] handles (ids at or above it share slots
/// modulo this count).
pub const MAX_LINUX_CPUS: usize = 1024;

/// One CPU's lock, alone on its cache line (the rseq section indexes the
/// array by `id << 6`).
#[derive(Debug)]
#[repr(align(64))]
pub struct CpuLock(AtomicU32);

const _: () = assert!(core::mem::size_of::<CpuLock>() == 64);

impl CpuLock {
    /// An unlocked lock (`const`, for a `static` array).
    pub const fn new() -> Self {
        CpuLock(AtomicU32::new(rseq::FREE))
    }

    /// The compare-exchange taker (no rseq in this process).
    #[inline(always)]
    fn try_lock(&self) -> bool {
        // Test first: a held lock costs a shared read, not a line transfer.
        self.0.load(Ordering::Relaxed) == rseq::FREE
            && self
                .0
                .compare_exchange(
                    rseq::FREE,
                    rseq::LOCAL,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Releases the lock (a guard's drop; also a forked child's reset of
    /// locks its parent's other threads held).
    ///
    /// # Safety
    /// The caller holds the lock, or no thread that could hold it exists
    /// any more (the child side of `fork`).
    #[inline(always)]
    pub unsafe fn unlock(&self) {
        self.0.store(rseq::FREE, Ordering::Release);
    }
}

impl Default for CpuLock {
    fn default() -> Self {
        Self::new()
    }
}

/// The calling thread's CPU, from the kernel (see the [module docs](self)).
#[derive(Clone, Copy, Debug)]
pub struct LinuxCpus {
    nr: usize,
    locks: &'static [CpuLock],
    /// `nr` in rseq mode, else 0: the ids the guard-free sections may
    /// commit on. Without rseq they run and miss at once, so the fast paths
    /// test no mode flag (see `pop_local`).
    local_nr: usize,
}

/// Held while a thread is pinned: the lock of CPU `id`.
#[derive(Debug)]
pub struct LinuxPin<'a> {
    lock: &'a CpuLock,
}

impl Drop for LinuxPin<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the guard exists only while its lock is held by us.
        unsafe { self.lock.unlock() }
    }
}

impl LinuxCpus {
    /// Whether the guard-free sections can commit on `stacks` (rseq mode,
    /// a stride they handle): only then must a holder stop and restart
    /// them.
    #[inline(always)]
    fn steps_commit(&self, stacks: &LocalStacks) -> bool {
        self.local_nr != 0 && rseq_stack::handles(stacks)
    }

    /// A backend with its own locks (leaked: one array per call, so create
    /// it once), sized by the machine's possible CPUs.
    pub fn new() -> Self {
        let nr = possible_cpus();
        let locks: &'static [CpuLock] =
            std::boxed::Box::leak((0..nr).map(|_| CpuLock::new()).collect());
        Self::with_locks(locks)
    }

    /// A backend over `locks` (e.g. a `static` array, for a `malloc` that
    /// must not allocate): as many CPUs as the machine's possible CPUs, at
    /// most `locks.len()` (ids above share slots modulo that, and then
    /// every lock is taken by compare-exchange: two CPUs share one).
    ///
    /// Every `LinuxCpus` over the same locks takes them the same way: the
    /// way is decided once per process.
    pub fn with_locks(locks: &'static [CpuLock]) -> Self {
        assert!(!locks.is_empty(), "LinuxCpus needs at least one lock");
        let possible = possible_cpus();
        let nr = possible.min(locks.len());
        let rseq = locks.len() >= possible && rseq::active();
        Self {
            nr,
            locks,
            local_nr: if rseq { nr } else { 0 },
        }
    }

    /// Whether this CPU's lock is taken by an rseq section (no LOCKed
    /// instruction; see the [module docs](self)).
    pub fn uses_rseq(&self) -> bool {
        self.local_nr != 0
    }

    /// The locks (a `fork` child handler releases them; see
    /// [`CpuLock::unlock`]).
    pub fn locks(&self) -> &'static [CpuLock] {
        &self.locks[..self.nr]
    }

    /// Tries to pin CPU `id` (the id of a previous pin, say, or any CPU's,
    /// from any CPU): its guard, or `None` if another thread holds it.
    /// Under rseq this costs a `membarrier` system call.
    pub fn try_pin_id(&self, id: usize) -> Option<LinuxPin<'_>> {
        let id = id % self.nr;
        let lock = &self.locks[id];
        let taken = if self.uses_rseq() {
            rseq::try_remote(lock, id)
        } else {
            lock.try_lock()
        };
        taken.then(|| LinuxPin { lock })
    }

    #[inline(always)]
    fn cpu(&self) -> usize {
        let id = raw_cpu();
        if id < self.nr { id } else { id % self.nr }
    }

    /// One attempt at the caller's CPU's lock: `Err(id)` if it is held.
    #[inline(always)]
    fn try_current(&self) -> Result<(LinuxPin<'_>, usize), usize> {
        if self.uses_rseq() {
            // SAFETY: in rseq mode `rseq::active()` answered and
            // `locks.len() >= nr`.
            match unsafe { rseq::try_local(self.locks, self.nr) } {
                Local::Taken(id) => {
                    return Ok((
                        LinuxPin {
                            lock: &self.locks[id],
                        },
                        id,
                    ));
                }
                Local::Busy(id) => return Err(id),
                Local::NoCpu => return self.try_current_remote(),
            }
        }
        let id = self.cpu();
        let lock = &self.locks[id];
        if lock.try_lock() {
            Ok((LinuxPin { lock }, id))
        } else {
            Err(id)
        }
    }

    /// A thread without a usable rseq `cpu_id` in an rseq process: takes
    /// `sched_getcpu()`'s lock the remote way.
    #[cold]
    fn try_current_remote(&self) -> Result<(LinuxPin<'_>, usize), usize> {
        let id = getcpu_cpu() % self.nr;
        self.try_pin_id(id).map(|g| (g, id)).ok_or(id)
    }
}

/// Retries `attempt` until it answers: spinning a little, then yielding
/// (the holder of the lock it tries was probably preempted: let it run).
fn spin_until<T>(mut attempt: impl FnMut() -> Option<T>) -> T {
    let mut spins = 0u32;
    loop {
        if let Some(t) = attempt() {
            return t;
        }
        spins += 1;
        if spins < 64 {
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

impl Default for LinuxCpus {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: ids are `0..nr`; `pin`'s and `try_pin`'s guards hold the lock of
// the id they answer, so no two threads run pinned on one id at once (the
// thread may be migrated while pinned: the lock, not the CPU, is what
// excludes); `OWNER_ONLY_WRITES` is `false` (a migrated thread may write
// another CPU's cell, so only the SMP CAS flavour is sound); `pinned_cpu`
// is never `Some`.
unsafe impl CpuLocal for LinuxCpus {
    const OWNER_ONLY_WRITES: bool = false;
    type Guard<'a> = LinuxPin<'a>;

    #[inline(always)]
    fn nr_cpus(&self) -> usize {
        self.nr
    }

    #[inline(always)]
    fn current_cpu(&self) -> Option<usize> {
        Some(self.cpu())
    }

    fn pin(&self) -> (LinuxPin<'_>, usize) {
        // The current CPU each time: after a wait the thread may run
        // elsewhere, where the lock is probably free.
        spin_until(|| self.try_current().ok())
    }

    #[inline(always)]
    fn try_pin(&self) -> Option<(LinuxPin<'_>, usize)> {
        self.try_current().ok()
    }

    /// Every CPU id in turn, under its lock (taken from this thread, as
    /// [`try_pin_id`](LinuxCpus::try_pin_id) does): the lock, not the CPU,
    /// is what excludes, so no migration is needed.
    fn on_each_cpu(&self, f: &(dyn Fn(usize) + Sync)) -> usize {
        for id in 0..self.nr {
            let _g = spin_until(|| self.try_pin_id(id));
            f(id);
        }
        self.nr
    }

    /// The same try-lock: a signal handler that interrupted the holder (on
    /// this thread or another one on this CPU) finds the lock taken.
    #[inline(always)]
    fn try_pin_nolock(&self) -> Option<(LinuxPin<'_>, usize)> {
        self.try_pin()
    }

    /// An rseq section on x86_64 with glibc (module `rseq_stack`) when the
    /// heads are a line or a row apart ([`LocalStacks::LINE`],
    /// [`LocalStacks::ROW`]); else [`LocalOp::Pin`]. Outside rseq mode the
    /// section misses at once (it may commit only below `local_nr`, 0
    /// then), and the caller's slow path pins: one test fewer on every
    /// fast path than a mode flag (BENCHMARKS.md, session 19).
    #[inline(always)]
    unsafe fn pop_local(&self, stacks: &LocalStacks) -> LocalOp {
        if rseq_stack::handles(stacks) {
            // SAFETY: `local_nr` is non-zero only when `rseq::active()`;
            // the caller's contract covers `stacks`.
            return unsafe { rseq_stack::pop(self.local_nr, stacks) };
        }
        LocalOp::Pin
    }

    #[inline(always)]
    unsafe fn push_local(&self, stacks: &LocalStacks, value: usize) -> LocalOp {
        if rseq_stack::handles(stacks) {
            // SAFETY: as in `pop_local`.
            return unsafe { rseq_stack::push(self.local_nr, stacks, value) };
        }
        LocalOp::Pin
    }

    /// Only where the sections can commit (rseq mode, a stride they
    /// handle): a section on the caller's CPU if it is `cpu`, else a store
    /// and `membarrier` aimed at `cpu` (module `rseq_stack`).
    #[inline]
    unsafe fn stop_local(&self, stacks: &LocalStacks, cpu: usize) {
        if self.steps_commit(stacks) {
            // SAFETY: rseq is active (`local_nr`); the caller holds `cpu`'s
            // guard and `stacks` is as the sections are given it.
            unsafe { rseq_stack::stop(cpu, stacks.cap_word(cpu), true) };
        }
    }

    #[inline]
    unsafe fn restart_local(&self, stacks: &LocalStacks, cpu: usize, cap: usize) {
        if self.steps_commit(stacks) {
            // SAFETY: the caller's contract: the word is the stopped
            // stack's, aligned, ours while we hold the guard. Release keeps
            // the holder's changes to the stack before it (a plain store on
            // x86; the sections read the capacity first).
            let word = unsafe { core::sync::atomic::AtomicUsize::from_ptr(stacks.cap_word(cpu)) };
            word.store(cap, core::sync::atomic::Ordering::Release);
        }
    }
}

/// The CPU the caller runs on now (possibly `>= nr`; never fails).
#[inline(always)]
pub fn raw_cpu() -> usize {
    match rseq_cpu() {
        Some(id) => id,
        None => getcpu_cpu(),
    }
}

/// `sched_getcpu()` (the vDSO `getcpu`; newer glibc reads `rseq` itself).
#[inline]
pub fn getcpu_cpu() -> usize {
    // SAFETY: no preconditions; -1 only if the kernel has no getcpu.
    let id = unsafe { libc::sched_getcpu() };
    if id < 0 { 0 } else { id as usize }
}

#[cfg(all(
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
unsafe extern "C" {
    // glibc 2.35+: the offset of the thread's `struct rseq` from the thread
    // pointer, and its registered size (0 if glibc did not register it).
    static __rseq_offset: isize;
    static __rseq_size: u32;
}

/// The `cpu_id` of the thread's rseq area, if registered (one load).
#[inline(always)]
pub fn rseq_cpu() -> Option<usize> {
    #[cfg(all(
        target_env = "gnu",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        // SAFETY: glibc's exported constants, written before any user code
        // runs (read-only after start-up).
        let (off, size) = unsafe { (__rseq_offset, __rseq_size) };
        if size == 0 {
            return None;
        }
        let tp: usize;
        // SAFETY: reads the thread pointer register; no memory is touched.
        unsafe {
            #[cfg(target_arch = "x86_64")]
            core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
            #[cfg(target_arch = "aarch64")]
            core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nostack, nomem, preserves_flags));
        }
        // `struct rseq { u32 cpu_id_start; u32 cpu_id; ... }`: the kernel
        // writes `cpu_id` on every return to user space after a migration;
        // it is -1 / -2 (huge as u32) while unregistered.
        let at = tp.wrapping_add_signed(off) + 4;
        // SAFETY: glibc places a registered rseq area at this offset in every
        // thread's TCB, live for the thread's life; a volatile read because
        // the kernel writes it behind the compiler's back.
        let id = unsafe { core::ptr::read_volatile(at as *const u32) };
        if (id as usize) < MAX_LINUX_CPUS {
            return Some(id as usize);
        }
        None
    }
    #[cfg(not(all(
        target_env = "gnu",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    None
}

/// The machine's possible CPUs (`/sys/devices/system/cpu/possible`, e.g.
/// `0-15`: its highest id plus one), read with raw `open`/`read` (no
/// allocation); the configured count from `sysconf` if that fails.
pub fn possible_cpus() -> usize {
    let mut buf = [0u8; 256];
    // SAFETY: a NUL-terminated path; `buf` is ours for `len` bytes.
    let n = unsafe {
        let fd = libc::open(
            c"/sys/devices/system/cpu/possible".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            -1
        } else {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::close(fd);
            n
        }
    };
    let parsed = (n > 0)
        .then(|| parse_possible(&buf[..n as usize]))
        .flatten();
    parsed
        .unwrap_or_else(|| {
            // SAFETY: no preconditions.
            let c = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
            c.max(1) as usize
        })
        .clamp(1, MAX_LINUX_CPUS)
}

/// The highest id in a CPU list (`0-3,8-11\n`) plus one.
fn parse_possible(s: &[u8]) -> Option<usize> {
    let mut max = None;
    let mut cur: Option<usize> = None;
    for &b in s {
        match b {
            b'0'..=b'9' => cur = Some(cur.unwrap_or(0) * 10 + (b - b'0') as usize),
            b',' | b'-' | b'\n' => {
                if let Some(c) = cur.take() {
                    max = max.max(Some(c));
                }
            }
            _ => return None,
        }
    }
    if let Some(c) = cur {
        max = max.max(Some(c));
    }
    max.map(|m| m + 1)
}

#[cfg(test)]
#[path = "linux/linux_tests.rs"]
mod tests;
