//! The arm64 double-word compare-and-swap, on a 16-byte aligned
//! [`DwCell`] (compiled for `target_arch = "aarch64"` only).
//!
//! Which sequence is compiled is fixed at build time by the target features:
//!
//! * With LSE (`cfg(target_feature = "lse")`, Armv8.1): one `CASPAL` (SMP
//!   flavour) or `CASP` (CPU-local flavour) — Arm ARM (DDI 0487) C6,
//!   "CASP, CASPA, CASPAL, CASPL". The compared pair and the new pair must
//!   each be an even/odd register pair (`Xs` even, `Xs+1`), so the operands
//!   are the explicit registers `x0:x1` (compare, and result) and `x2:x3`
//!   (new). On little-endian, `Xs` pairs with the word at the lower address.
//! * Without LSE (Armv8.0): a load/store-exclusive pair loop — C6 "LDAXP",
//!   "STLXP" (SMP flavour, acquire / release) and "LDXP", "STXP" (CPU-local
//!   flavour). `LDXP` alone does not read the pair single-copy atomically
//!   (Arm ARM B2.2.1: a 128-bit exclusive pair load is single-copy atomic
//!   only when the matching store-exclusive succeeds), so on a failed compare
//!   the loop stores the loaded pair back with a store-exclusive and retries
//!   if that fails: the `Err` value returned is then a pair that really was in
//!   memory at one instant. This is what compilers emit for 128-bit
//!   `compare_exchange` on Armv8.0.
//!
//! [`Casp::NAME`](arch_api::DwCas::NAME) says which path was compiled.
//!
//! # The CPU-local flavour
//!
//! x86 has a cheaper non-atomic form (`cmpxchg16b` without `LOCK`) that is
//! atomic only against interrupts on the executing CPU. arm64 has no such
//! form: every `CASP` and every successful `LDXP`/`STXP` pair is
//! single-copy atomic for all observers. What Linux's
//! `this_cpu_cmpxchg_double` needs — atomicity against an interrupt or
//! preemption on this CPU, and *no ordering* against other CPUs — is therefore
//! obtained by dropping the acquire/release semantics: plain `CASP`, or
//! `LDXP`/`STXP`. (An exception taken between `LDXP` and `STXP` clears the
//! local exclusive monitor on return, so the store fails and the loop
//! retries.) That was Linux's own choice: `__cmpxchg_double` vs
//! `__cmpxchg_double_mb` in `arch/arm64/include/asm/atomic_{lse,ll_sc}.h`
//! (up to 6.3; later kernels use the same split for `cmpxchg128_local`).
//!
//! # Under miri and loom
//!
//! Neither can run inline assembly, so under `cfg(miri)` or `cfg(kmm_loom)` both
//! flavours call [`DwCell::locked_compare_exchange`] (under loom, the model of
//! the hardware instruction); [`Casp::NAME`](arch_api::DwCas::NAME) says so.

use arch_api::{DoubleWord, DwCas, DwCell};

/// The arm64 double-word CAS: `caspal`/`casp` with LSE, an
/// `ldaxp`/`stlxp` (`ldxp`/`stxp`) loop without.
#[derive(Clone, Copy, Debug, Default)]
pub struct Casp;

#[cfg(any(miri, kmm_loom))]
const NAME: &str = "locked (miri/loom model)";
#[cfg(all(not(any(miri, kmm_loom)), target_feature = "lse"))]
const NAME: &str = "caspal (LSE)";
#[cfg(all(not(any(miri, kmm_loom)), not(target_feature = "lse")))]
const NAME: &str = "ldaxp/stlxp";

impl DwCas for Casp {
    const NAME: &'static str = NAME;

    /// `caspal`, or an `ldaxp`/`stlxp` loop: acquire-release, atomic against
    /// every CPU.
    #[inline]
    fn compare_exchange(
        cell: &DwCell,
        current: DoubleWord,
        new: DoubleWord,
    ) -> Result<DoubleWord, DoubleWord> {
        #[cfg(any(miri, kmm_loom))]
        return cell.locked_compare_exchange(current, new, arch_api::Compare::Both);
        #[cfg(not(any(miri, kmm_loom)))]
        {
            // SAFETY: `as_ptr` points at the cell's two words, 16-byte aligned
            // (`DwCell` is `repr(C, align(16))`), valid for reads and writes for
            // the borrow of `cell`, and only ever accessed atomically.
            let seen = unsafe { hw::cas_acq_rel(cell.as_ptr(), current, new) };
            result(seen, current)
        }
    }

    /// `casp`, or an `ldxp`/`stxp` loop: still atomic for all observers (arm64
    /// has nothing weaker), but with no ordering against other CPUs.
    #[inline]
    fn compare_exchange_local(
        cell: &DwCell,
        current: DoubleWord,
        new: DoubleWord,
    ) -> Result<DoubleWord, DoubleWord> {
        #[cfg(any(miri, kmm_loom))]
        return cell.locked_compare_exchange(current, new, arch_api::Compare::Both);
        #[cfg(not(any(miri, kmm_loom)))]
        {
            // SAFETY: as in `compare_exchange`: an aligned pointer to the cell's
            // two words, valid for the borrow, only accessed atomically.
            let seen = unsafe { hw::cas_relaxed(cell.as_ptr(), current, new) };
            result(seen, current)
        }
    }
}

#[cfg(not(any(miri, kmm_loom)))]
#[inline(always)]
fn result(seen: DoubleWord, current: DoubleWord) -> Result<DoubleWord, DoubleWord> {
    if seen == current { Ok(seen) } else { Err(seen) }
}

/// `CASPAL` / `CASP` (FEAT_LSE).
#[cfg(all(not(any(miri, kmm_loom)), target_feature = "lse"))]
mod hw {
    use arch_api::DoubleWord;
    use core::arch::asm;

    /// One `caspal`: returns the pair found at `ptr`, which was replaced by
    /// `new` if it equalled `current`.
    ///
    /// # Safety
    /// `ptr` is 16-byte aligned, valid for reads and writes of 16 bytes, and
    /// only accessed atomically while this runs.
    #[inline(always)]
    pub(super) unsafe fn cas_acq_rel(
        ptr: *mut u64,
        current: DoubleWord,
        new: DoubleWord,
    ) -> DoubleWord {
        let (lo, hi): (u64, u64);
        // SAFETY: the caller guarantees an aligned, valid, atomically accessed
        // pair. x0:x1 and x2:x3 are the even/odd pairs CASP requires; the
        // memory clobber (no `nomem`) orders the compiler around it.
        unsafe {
            asm!(
                "caspal x0, x1, x2, x3, [{ptr}]",
                ptr = in(reg) ptr,
                inout("x0") current.lo => lo,
                inout("x1") current.hi => hi,
                in("x2") new.lo,
                in("x3") new.hi,
                options(nostack, preserves_flags),
            );
        }
        DoubleWord { lo, hi }
    }

    /// One `casp` (no acquire, no release).
    ///
    /// # Safety
    /// As [`cas_acq_rel`].
    #[inline(always)]
    pub(super) unsafe fn cas_relaxed(
        ptr: *mut u64,
        current: DoubleWord,
        new: DoubleWord,
    ) -> DoubleWord {
        let (lo, hi): (u64, u64);
        // SAFETY: as in `cas_acq_rel`.
        unsafe {
            asm!(
                "casp x0, x1, x2, x3, [{ptr}]",
                ptr = in(reg) ptr,
                inout("x0") current.lo => lo,
                inout("x1") current.hi => hi,
                in("x2") new.lo,
                in("x3") new.hi,
                options(nostack, preserves_flags),
            );
        }
        DoubleWord { lo, hi }
    }
}

/// `LDAXP`/`STLXP` and `LDXP`/`STXP` loops (Armv8.0).
#[cfg(all(not(any(miri, kmm_loom)), not(target_feature = "lse")))]
mod hw {
    use arch_api::DoubleWord;
    use core::arch::asm;

    /// Builds the loop with the given load- and store-exclusive mnemonics.
    /// Every operand is `out`/`in` (never `lateout`), so the status register
    /// differs from the data and address registers, as `STXP` requires.
    macro_rules! ll_sc_cas {
        ($ldxp:literal, $stxp:literal, $ptr:expr, $current:expr, $new:expr) => {{
            let (lo, hi): (u64, u64);
            asm!(
                "2:",
                concat!($ldxp, " {lo}, {hi}, [{ptr}]"),
                "cmp {lo}, {clo}",
                "ccmp {hi}, {chi}, #0, eq",
                "b.ne 3f",
                concat!($stxp, " {st:w}, {nlo}, {nhi}, [{ptr}]"),
                "cbnz {st:w}, 2b",
                "b 4f",
                // Compare failed: store the loaded pair back, so that it is
                // known to have been read single-copy atomically.
                "3:",
                concat!($stxp, " {st:w}, {lo}, {hi}, [{ptr}]"),
                "cbnz {st:w}, 2b",
                "4:",
                ptr = in(reg) $ptr,
                clo = in(reg) $current.lo,
                chi = in(reg) $current.hi,
                nlo = in(reg) $new.lo,
                nhi = in(reg) $new.hi,
                lo = out(reg) lo,
                hi = out(reg) hi,
                st = out(reg) _,
                options(nostack),
            );
            DoubleWord { lo, hi }
        }};
    }

    /// `ldaxp`/`stlxp` loop: returns the pair found at `ptr`, which was
    /// replaced by `new` if it equalled `current`.
    ///
    /// # Safety
    /// `ptr` is 16-byte aligned, valid for reads and writes of 16 bytes, and
    /// only accessed atomically while this runs.
    #[inline(always)]
    pub(super) unsafe fn cas_acq_rel(
        ptr: *mut u64,
        current: DoubleWord,
        new: DoubleWord,
    ) -> DoubleWord {
        // SAFETY: the caller guarantees an aligned, valid, atomically accessed
        // pair; the loop only writes the pair through a successful exclusive
        // store; the memory clobber (no `nomem`) orders the compiler around it.
        unsafe { ll_sc_cas!("ldaxp", "stlxp", ptr, current, new) }
    }

    /// `ldxp`/`stxp` loop (no acquire, no release).
    ///
    /// # Safety
    /// As [`cas_acq_rel`].
    #[inline(always)]
    pub(super) unsafe fn cas_relaxed(
        ptr: *mut u64,
        current: DoubleWord,
        new: DoubleWord,
    ) -> DoubleWord {
        // SAFETY: as in `cas_acq_rel`.
        unsafe { ll_sc_cas!("ldxp", "stxp", ptr, current, new) }
    }
}

// Loom's cell only works inside `loom::model`; these are plain tests.
#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use arch_api::conformance;
    use core::sync::atomic::Ordering;

    #[test]
    fn single_thread_conforms() {
        conformance::dwcas_single_thread::<Casp>();
    }

    #[test]
    fn stress_conforms() {
        let iters = if cfg!(miri) { 30 } else { 20_000 };
        conformance::dwcas_stress::<Casp>(4, iters);
    }

    #[test]
    fn compiled_path_matches_target_feature() {
        let expected = if cfg!(any(miri, kmm_loom)) {
            "locked (miri/loom model)"
        } else if cfg!(target_feature = "lse") {
            "caspal (LSE)"
        } else {
            "ldaxp/stlxp"
        };
        assert_eq!(Casp::NAME, expected);
    }

    #[test]
    fn local_flavour_counts_exactly_on_one_thread() {
        // The local flavour is for cells only one CPU writes: alternate a
        // matching CAS and a stale one, many times, and check each result.
        let cell = DwCell::new(DoubleWord::new(0, !0));
        let n = if cfg!(miri) { 50 } else { 10_000 };
        for i in 0..n {
            let r = Casp::compare_exchange_local(
                &cell,
                DoubleWord::new(i, !i),
                DoubleWord::new(i + 1, !(i + 1)),
            );
            assert_eq!(r, Ok(DoubleWord::new(i, !i)));
            let stale =
                Casp::compare_exchange_local(&cell, DoubleWord::new(i, !i), DoubleWord::new(0, 0));
            assert_eq!(stale, Err(DoubleWord::new(i + 1, !(i + 1))));
        }
        assert_eq!(cell.load_lo(Ordering::Relaxed), n);
        assert_eq!(cell.load_hi(Ordering::Relaxed), !n);
    }
}
