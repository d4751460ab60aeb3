//! loom models of the double-word CAS cell.
//!
//! Under `--cfg kmm_loom` the cell is built from loom primitives, so these models
//! explore every interleaving of the single-word loads and the CAS. The last
//! model is the broken variant: a compare that ignores a word which does not
//! change on every update loses an update, and loom must find it.
#![cfg(kmm_loom)]

use arch_api::{Compare, DoubleWord, DwCas, DwCell, LockedDwCas};
use loom::sync::Arc;
use loom::sync::atomic::Ordering;
use loom::thread;

/// Reads the pair the way SLUB's fast path does (tid, then freelist) and
/// retries the CAS until it lands. `bump_hi` says whether the update steps the
/// `hi` word (the tid).
fn increment(cell: &DwCell, compare: Compare, bump_hi: bool) {
    let hi = cell.load_hi(Ordering::Acquire);
    let lo = cell.load_lo(Ordering::Acquire);
    let mut cur = DoubleWord::new(lo, hi);
    loop {
        let new = DoubleWord::new(cur.lo + 1, cur.hi + u64::from(bump_hi));
        let r = match compare {
            Compare::Both => LockedDwCas::compare_exchange(cell, cur, new),
            Compare::HiOnly => cell.locked_compare_exchange(cur, new, Compare::HiOnly),
        };
        match r {
            Ok(_) => return,
            Err(seen) => cur = seen,
        }
    }
}

fn two_cpus(compare: Compare, bump_hi: bool) {
    loom::model(move || {
        let cell = Arc::new(DwCell::new(DoubleWord::new(0, 0)));
        let other = {
            let cell = cell.clone();
            thread::spawn(move || increment(&cell, compare, bump_hi))
        };
        increment(&cell, compare, bump_hi);
        other.join().unwrap();
        assert_eq!(cell.load().lo, 2, "an increment was lost");
    });
}

#[test]
fn full_compare_never_loses_an_update() {
    two_cpus(Compare::Both, false);
}

#[test]
fn hi_only_compare_is_safe_when_hi_steps_every_update() {
    two_cpus(Compare::HiOnly, true);
}

#[test]
#[should_panic(expected = "an increment was lost")]
fn hi_only_compare_without_a_tid_loses_updates() {
    two_cpus(Compare::HiOnly, false);
}
