//! `cmp8xchg16`: compare 8 bytes, exchange 16.
//!
//! Itanium 2 added a sixteen-byte form of `cmpxchg` (Intel Itanium
//! Architecture Software Developer's Manual, Vol. 3, "cmpxchg — Compare and
//! Exchange"): `cmp8xchg16.sem r1 = [r3], r2, ar.csd, ar.ccv` reads the 8
//! bytes at `r3` and compares them with `ar.ccv`; if equal it stores `r2` at
//! `r3 & ~8` and `ar.csd` at `(r3 & ~8) + 8`. The 8-byte read and the
//! 16-byte write are one atomic operation; `r1` receives the 8 bytes read;
//! `.sem` is `.acq` or `.rel`. With `r3` pointing at the `hi` word of a
//! [`DwCell`], that is exactly [`Compare::HiOnly`]: only `hi` is compared,
//! both words are written.
//!
//! There is no ia64 hardware here: [`Cmp8xchg16`] runs both flavours through
//! [`DwCell::locked_compare_exchange`] with `Compare::HiOnly`, which is
//! atomic against every other locked CAS and single-word load of the cell and
//! at least acquire-release ordered. On failure it reports both words it
//! found; the real instruction returns only the compared one, and a retry
//! loop on hardware would reload `lo` itself. Linux never used the
//! instruction for SLUB (ia64 did not select `HAVE_CMPXCHG_DOUBLE`); this
//! backend exists so that slub-core's fast path is exercised against a
//! compare that does not look at the freelist.
//!
//! # Why comparing the tid alone is enough for SLUB
//!
//! SLUB's per-CPU state is `(freelist, tid)` with the tid in `hi`. The fast
//! path reads the tid first, then the freelist, computes the new pair and
//! CASes it in. Every successful update stores a tid different from the one
//! it read (Linux steps it by `TID_STEP`, so the tids of different CPUs never
//! meet either). Hence, if the CAS still finds the tid it read, *no update
//! completed since that read*: any update would have left another tid. The
//! freelist was read after the tid, so it is the freelist that tid vouches
//! for, and comparing it as well would add nothing.
//!
//! The argument has one bound: a tid repeats after `2^64 / step` updates.
//! A reader stalled between its tid read and its CAS across exactly a
//! multiple of that many updates would succeed on a stale freelist (ABA). At
//! a step of 4096 (`TID_STEP` for ia64's default `NR_CPUS` of 4096) that is 2^52 ≈ 4.5 × 10^15 updates, over 52 days at a
//! billion updates a second, on one CPU's state.
//!
//! # What breaks when `hi` can repeat
//!
//! The argument needs `hi` to change on *every* update. A caller whose `hi`
//! can stay the same across an update (a generation bumped only on some
//! operations, a counter that toggles, a constant) loses updates: a CAS based
//! on a stale `lo` still matches and overwrites the newer `lo`. The test
//! `repeating_hi_lets_a_stale_lo_overwrite_a_newer_one` shows it.

use arch_api::{Compare, DoubleWord, DwCas, DwCell};

/// Simulated ia64 `cmp8xchg16`: compares `hi` only, exchanges both words.
/// Only for cells whose `hi` changes on every update (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct Cmp8xchg16;

impl DwCas for Cmp8xchg16 {
    const NAME: &'static str = "cmp8xchg16 (simulated)";
    const COMPARE: Compare = Compare::HiOnly;

    /// Stands for `cmp8xchg16.acq` / `.rel` on the `hi` word.
    fn compare_exchange(
        cell: &DwCell,
        current: DoubleWord,
        new: DoubleWord,
    ) -> Result<DoubleWord, DoubleWord> {
        cell.locked_compare_exchange(current, new, Compare::HiOnly)
    }

    /// The same operation: ia64 has no cheaper unlocked form of
    /// `cmp8xchg16`; the simulated one is the locked model either way.
    fn compare_exchange_local(
        cell: &DwCell,
        current: DoubleWord,
        new: DoubleWord,
    ) -> Result<DoubleWord, DoubleWord> {
        cell.locked_compare_exchange(current, new, Compare::HiOnly)
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use arch_api::{LockedDwCas, conformance};
    use core::sync::atomic::Ordering;

    #[test]
    fn conforms_single_thread() {
        assert_eq!(Cmp8xchg16::COMPARE, Compare::HiOnly);
        conformance::dwcas_single_thread::<Cmp8xchg16>();
    }

    #[test]
    fn conforms_under_stress() {
        let iters = if cfg!(miri) { 50 } else { 20_000 };
        conformance::dwcas_stress::<Cmp8xchg16>(4, iters);
    }

    /// The SLUB pattern: each update steps the tid, so an update between a
    /// reader's loads and its CAS makes the CAS fail even though only the
    /// tid is compared.
    #[test]
    fn stepped_tid_rejects_a_stale_freelist() {
        const STEP: u64 = 4096;
        let cell = DwCell::new(DoubleWord::new(0x1000, 7 * STEP));
        // Reader: tid first, then freelist.
        let tid = cell.load_hi(Ordering::Acquire);
        let freelist = cell.load_lo(Ordering::Acquire);
        // Someone else pops an object: new freelist, next tid.
        let other = Cmp8xchg16::compare_exchange(
            &cell,
            DoubleWord::new(freelist, tid),
            DoubleWord::new(0x1040, tid + STEP),
        );
        assert!(other.is_ok());
        // The reader's CAS, on the stale pair, must fail and show the new one.
        let stale = Cmp8xchg16::compare_exchange(
            &cell,
            DoubleWord::new(freelist, tid),
            DoubleWord::new(0x2000, tid + STEP),
        );
        assert_eq!(stale, Err(DoubleWord::new(0x1040, 8 * STEP)));
        assert_eq!(cell.load(), DoubleWord::new(0x1040, 8 * STEP));
    }

    /// The documented hazard: with a `hi` word that does not change, a CAS
    /// computed from a stale `lo` succeeds and overwrites the newer `lo`.
    #[test]
    fn repeating_hi_lets_a_stale_lo_overwrite_a_newer_one() {
        const HI: u64 = 42; // never changes: not a tid
        let cell = DwCell::new(DoubleWord::new(0xa, HI));
        let seen = cell.load(); // (0xa, 42)
        // Another update: lo 0xa -> 0xb, hi unchanged.
        assert!(Cmp8xchg16::compare_exchange(&cell, seen, DoubleWord::new(0xb, HI)).is_ok());
        // The stale CAS (expects lo 0xa) goes through anyway ...
        let r = Cmp8xchg16::compare_exchange(&cell, seen, DoubleWord::new(0xc, HI));
        assert_eq!(r, Ok(DoubleWord::new(0xb, HI)), "lo 0xb is lost");
        assert_eq!(cell.load(), DoubleWord::new(0xc, HI));

        // ... where a full double-word compare would have refused it.
        let cell = DwCell::new(DoubleWord::new(0xa, HI));
        let seen = cell.load();
        assert!(LockedDwCas::compare_exchange(&cell, seen, DoubleWord::new(0xb, HI)).is_ok());
        let r = LockedDwCas::compare_exchange(&cell, seen, DoubleWord::new(0xc, HI));
        assert_eq!(r, Err(DoubleWord::new(0xb, HI)));
    }
}
