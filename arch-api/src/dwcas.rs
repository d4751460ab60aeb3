//! Double-word compare-and-swap on a 16-byte aligned pair of words.
//!
//! SLUB keeps its per-CPU state as `(freelist, tid)` and updates both with one
//! CAS: the tid changes on every operation, so the CAS fails if anything ran
//! in between (preemption, migration, an interrupt on the same CPU). Backends
//! implement [`DwCas`] with `cmpxchg16b`, `casp` / `ldxp`+`stxp` or a simulated
//! `cmp8xchg16`; [`LockedDwCas`] is the portable lock-based version.
//!
//! Under `cfg(miri)` (no inline asm) and `cfg(kmm_loom)` (no 128-bit atomics)
//! every backend routes through [`DwCell::locked_compare_exchange`], which
//! under loom is a model built from loom primitives, so the checker explores
//! the interleavings around each CAS and each single-word load.

use crate::atomic::{AtomicU64, Ordering};

/// The two words of a [`DwCell`]. For SLUB, `lo` is the freelist and `hi` the tid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct DoubleWord {
    /// The word at the lower address.
    pub lo: u64,
    /// The word at the higher address.
    pub hi: u64,
}

impl DoubleWord {
    /// A pair.
    pub const fn new(lo: u64, hi: u64) -> Self {
        Self { lo, hi }
    }
}

/// Which words a backend's compare looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// Both words must match (`cmpxchg16b`, `casp`).
    Both,
    /// Only `hi` must match; both are exchanged (ia64's `cmp8xchg16`). Correct
    /// only for users whose `hi` word changes on every successful update, as a
    /// tid does.
    HiOnly,
}

/// A 16-byte aligned pair of 64-bit words updated by double-word CAS.
///
/// Each half can also be read on its own with a single-word atomic load, which
/// is what SLUB's fast path does (tid first, then freelist): the pair is never
/// read as a snapshot, the CAS is what validates it.
#[repr(C, align(16))]
pub struct DwCell {
    words: [AtomicU64; 2],
    #[cfg(kmm_loom)]
    lock: loom::sync::Mutex<()>,
}

impl core::fmt::Debug for DwCell {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DwCell")
            .field("lo", &self.load_lo(Ordering::Relaxed))
            .field("hi", &self.load_hi(Ordering::Relaxed))
            .finish()
    }
}

impl DwCell {
    /// A cell holding `v`.
    #[cfg(not(kmm_loom))]
    pub const fn new(v: DoubleWord) -> Self {
        Self {
            words: [AtomicU64::new(v.lo), AtomicU64::new(v.hi)],
        }
    }

    /// A cell holding `v`.
    #[cfg(kmm_loom)]
    pub fn new(v: DoubleWord) -> Self {
        Self {
            words: [AtomicU64::new(v.lo), AtomicU64::new(v.hi)],
            lock: loom::sync::Mutex::new(()),
        }
    }

    /// Single-word atomic load of `lo`.
    #[inline]
    pub fn load_lo(&self, order: Ordering) -> u64 {
        self.words[0].load(order)
    }

    /// Single-word atomic load of `hi`.
    #[inline]
    pub fn load_hi(&self, order: Ordering) -> u64 {
        self.words[1].load(order)
    }

    /// Both halves, `hi` first then `lo` (acquire). Not a snapshot: another CPU
    /// may update the pair between the two loads; validate with a CAS.
    #[inline]
    pub fn load(&self) -> DoubleWord {
        let hi = self.load_hi(Ordering::Acquire);
        let lo = self.load_lo(Ordering::Acquire);
        DoubleWord { lo, hi }
    }

    /// The pair, read through exclusive access.
    pub fn get_mut(&mut self) -> DoubleWord {
        #[cfg(not(kmm_loom))]
        return DoubleWord {
            lo: *self.words[0].get_mut(),
            hi: *self.words[1].get_mut(),
        };
        #[cfg(kmm_loom)]
        return DoubleWord {
            lo: self.words[0].load(Ordering::Relaxed),
            hi: self.words[1].load(Ordering::Relaxed),
        };
    }

    /// The address of the pair, for inline-asm backends. 16-byte aligned by the
    /// type's `repr(align(16))`.
    #[cfg(not(kmm_loom))]
    #[inline]
    pub fn as_ptr(&self) -> *mut u64 {
        self.words.as_ptr() as *mut u64
    }

    /// Compare-and-swap under a lock: the portable backend, the path every
    /// backend takes under miri, and (under loom) the model of the hardware
    /// instruction. Atomic against every other `locked_compare_exchange` on the
    /// same cell and against the single-word loads; not against a hardware DW-CAS
    /// on the same cell, so a cell must be updated by one backend only.
    pub fn locked_compare_exchange(
        &self,
        current: DoubleWord,
        new: DoubleWord,
        compare: Compare,
    ) -> Result<DoubleWord, DoubleWord> {
        #[cfg(kmm_loom)]
        let _guard = self.lock.lock().unwrap();
        #[cfg(not(kmm_loom))]
        let _guard = stripe_lock(self);
        let observed = DoubleWord {
            lo: self.words[0].load(Ordering::Acquire),
            hi: self.words[1].load(Ordering::Acquire),
        };
        let matches = match compare {
            Compare::Both => observed == current,
            Compare::HiOnly => observed.hi == current.hi,
        };
        if matches {
            self.words[0].store(new.lo, Ordering::Release);
            self.words[1].store(new.hi, Ordering::Release);
            Ok(observed)
        } else {
            Err(observed)
        }
    }
}

/// A double-word compare-and-swap instruction.
///
/// Both methods return `Ok(previous)` when the cell held `current` (per
/// [`Self::COMPARE`]) and now holds `new`, else `Err(observed)` with the value
/// found, which the caller uses to retry.
pub trait DwCas: Send + Sync + 'static {
    /// Name of the instruction sequence, for reports (`"lock cmpxchg16b"`).
    const NAME: &'static str;
    /// Which words the compare looks at.
    const COMPARE: Compare = Compare::Both;

    /// SMP-atomic flavour: atomic against every CPU, with acquire-release
    /// ordering (x86 `lock cmpxchg16b`, arm64 `caspal` / `ldaxp`+`stlxp`).
    fn compare_exchange(
        cell: &DwCell,
        current: DoubleWord,
        new: DoubleWord,
    ) -> Result<DoubleWord, DoubleWord>;

    /// CPU-local flavour: atomic only against interrupts on the executing CPU
    /// (x86 `cmpxchg16b` without LOCK, as Linux's `this_cpu_cmpxchg_double`),
    /// with no ordering against other CPUs. Only for cells that no other CPU
    /// writes concurrently.
    fn compare_exchange_local(
        cell: &DwCell,
        current: DoubleWord,
        new: DoubleWord,
    ) -> Result<DoubleWord, DoubleWord>;
}

/// The portable backend: a striped lock around two single-word stores.
/// Correct everywhere; the slow reference the real instructions are compared with.
#[derive(Debug, Clone, Copy, Default)]
pub struct LockedDwCas;

impl DwCas for LockedDwCas {
    const NAME: &'static str = "locked (portable)";

    fn compare_exchange(
        cell: &DwCell,
        current: DoubleWord,
        new: DoubleWord,
    ) -> Result<DoubleWord, DoubleWord> {
        cell.locked_compare_exchange(current, new, Compare::Both)
    }

    fn compare_exchange_local(
        cell: &DwCell,
        current: DoubleWord,
        new: DoubleWord,
    ) -> Result<DoubleWord, DoubleWord> {
        cell.locked_compare_exchange(current, new, Compare::Both)
    }
}

#[cfg(not(kmm_loom))]
mod stripes {
    use core::sync::atomic::{AtomicBool, Ordering};

    const STRIPES: usize = 64;

    /// One cache line per lock so unrelated cells do not false-share.
    #[repr(align(64))]
    pub(super) struct Stripe(AtomicBool);

    #[allow(clippy::declare_interior_mutable_const)]
    const UNLOCKED: Stripe = Stripe(AtomicBool::new(false));
    static LOCKS: [Stripe; STRIPES] = [UNLOCKED; STRIPES];

    pub(super) struct StripeGuard(&'static Stripe);

    impl Drop for StripeGuard {
        fn drop(&mut self) {
            self.0.0.store(false, Ordering::Release);
        }
    }

    pub(super) fn stripe_lock(cell: &super::DwCell) -> StripeGuard {
        let stripe = &LOCKS[(cell as *const _ as usize >> 4) % STRIPES];
        while stripe
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while stripe.0.load(Ordering::Relaxed) {
                core::hint::spin_loop();
            }
        }
        StripeGuard(stripe)
    }
}
#[cfg(not(kmm_loom))]
use stripes::stripe_lock;

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use crate::conformance;

    #[test]
    fn cell_is_16_byte_aligned() {
        assert_eq!(core::mem::align_of::<DwCell>(), 16);
        assert_eq!(core::mem::size_of::<DwCell>(), 16);
    }

    #[test]
    fn locked_backend_conforms() {
        conformance::dwcas_single_thread::<LockedDwCas>();
        conformance::dwcas_stress::<LockedDwCas>(4, if cfg!(miri) { 50 } else { 20_000 });
    }

    #[test]
    fn hi_only_compare_ignores_lo() {
        let cell = DwCell::new(DoubleWord::new(1, 7));
        let r = cell.locked_compare_exchange(
            DoubleWord::new(99, 7),
            DoubleWord::new(2, 8),
            Compare::HiOnly,
        );
        assert_eq!(r, Ok(DoubleWord::new(1, 7)));
        assert_eq!(cell.load(), DoubleWord::new(2, 8));
        let r = cell.locked_compare_exchange(
            DoubleWord::new(2, 7),
            DoubleWord::new(3, 9),
            Compare::HiOnly,
        );
        assert_eq!(r, Err(DoubleWord::new(2, 8)));
    }
}
