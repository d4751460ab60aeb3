//! `cmpxchg16b`: the double-word CAS SLUB's `(freelist, tid)` fast path runs on.
//!
//! CMPXCHG16B m128 (Intel SDM Vol. 2A, "CMPXCHG8B/CMPXCHG16B—Compare and
//! Exchange Bytes") compares RDX:RAX with the 16 bytes at `m128`; if equal it
//! stores RCX:RBX there and sets ZF, otherwise it loads the memory value into
//! RDX:RAX and clears ZF. The operand must be 16-byte aligned (#GP otherwise;
//! [`DwCell`] is `align(16)`), and the CPU must report
//! CPUID.01H:ECX.CMPXCHG16B\[bit 13\] ([`crate::cpuid::has_cmpxchg16b`]; every
//! x86_64 CPU except the very first AMD K8 steppings does).
//!
//! Two flavours, as the [`DwCas`] trait asks:
//!
//! * [`DwCas::compare_exchange`]: `lock cmpxchg16b`. The LOCK prefix makes the
//!   read-compare-write atomic against every CPU and acts as a full barrier
//!   (Vol. 3A §9.2.3.8 "Locked Instructions Have a Total Order").
//! * [`DwCas::compare_exchange_local`]: `cmpxchg16b` **without** LOCK. An
//!   interrupt is only taken between instructions, so on the executing CPU the
//!   instruction is still indivisible with respect to interrupt handlers and to
//!   preemption (which starts from an interrupt), which is all a per-CPU cell
//!   needs. It is the trick behind Linux's `this_cpu_cmpxchg_double()` (now
//!   `this_cpu_try_cmpxchg128()`, a `%gs:`-relative `cmpxchg16b` with no lock):
//!   it skips the cost of the locked bus / cache-line transaction. It is **not**
//!   atomic against other CPUs: another CPU's store can land between the read
//!   and the write, and the SDM says the destination "receives a write cycle
//!   without regard to the result of the comparison" (a failed compare writes
//!   the old value back), so a concurrent writer's update can be lost even when
//!   the compare fails. Use it only on cells no other CPU writes.
//!
//! Rust's inline asm cannot name RBX as an operand (LLVM reserves it), so the
//! low word of the new value travels in a scratch register and is swapped into
//! RBX around the instruction (`xchg r11, rbx` … `mov rbx, r11`), as the
//! `portable-atomic` crate does. Every operand is pinned: the register
//! allocator *may* hand RBX to a `reg` operand, and a pointer in RBX would be
//! overwritten by the swap (an optimised build did exactly that before the
//! cell pointer was pinned; `rbx_survives_the_swap` and the
//! conformance tests crash in `--release` if it comes back). The scratch word
//! sits in R11 and the pointer in R10, caller-saved registers that no
//! argument uses: a `reg` operand given RBX made every function holding a
//! CAS save and restore RBX, and a pointer in RDI (the first argument) made
//! it keep `self` in a saved register; both were stack stores on the tid
//! front's remote free (BENCHMARKS.md, session 28).
//!
//! Under `cfg(miri)` (no inline asm) and `cfg(kmm_loom)` (no real 128-bit atomics
//! in the model) both flavours go through [`DwCell::locked_compare_exchange`].

use arch_api::{DoubleWord, DwCas, DwCell};

/// The x86_64 double-word CAS: `lock cmpxchg16b` (SMP) and plain `cmpxchg16b`
/// (CPU-local). See the [module docs](self) for the semantics of each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cmpxchg16b;

impl DwCas for Cmpxchg16b {
    const NAME: &'static str = "lock cmpxchg16b";

    #[inline]
    fn compare_exchange(
        cell: &DwCell,
        current: DoubleWord,
        new: DoubleWord,
    ) -> Result<DoubleWord, DoubleWord> {
        #[cfg(not(any(miri, kmm_loom)))]
        {
            // SAFETY: `as_ptr` points at the cell's two words, 16-byte aligned by
            // `DwCell`'s `repr(align(16))` and valid for the lifetime of `cell`;
            // the words are atomics (interior mutability), so writing them through
            // a shared reference is allowed, and every other access to them is
            // atomic too.
            let seen = unsafe { hw::lock_cmpxchg16b(cell.as_ptr(), current, new) };
            if seen == current { Ok(seen) } else { Err(seen) }
        }
        #[cfg(any(miri, kmm_loom))]
        {
            cell.locked_compare_exchange(current, new, arch_api::Compare::Both)
        }
    }

    #[inline]
    fn compare_exchange_local(
        cell: &DwCell,
        current: DoubleWord,
        new: DoubleWord,
    ) -> Result<DoubleWord, DoubleWord> {
        #[cfg(not(any(miri, kmm_loom)))]
        {
            // SAFETY: as for `compare_exchange`: a valid, 16-byte aligned pair of
            // atomic words. Without LOCK the update is not atomic against other
            // CPUs, which the trait's contract for this flavour makes the
            // caller's business (it is a logic hazard, not memory unsafety: each
            // 8-byte half is still written whole).
            let seen = unsafe { hw::cmpxchg16b_local(cell.as_ptr(), current, new) };
            if seen == current { Ok(seen) } else { Err(seen) }
        }
        #[cfg(any(miri, kmm_loom))]
        {
            cell.locked_compare_exchange(current, new, arch_api::Compare::Both)
        }
    }
}

#[cfg(not(any(miri, kmm_loom)))]
mod hw {
    use arch_api::DoubleWord;
    use core::arch::asm;

    /// `lock cmpxchg16b [ptr]`; returns the value found (RDX:RAX after the
    /// instruction), which equals `current` exactly when the exchange happened.
    ///
    /// # Safety
    /// `ptr` must be valid for 16-byte reads and writes, 16-byte aligned, and
    /// not accessed non-atomically by anyone else meanwhile.
    #[inline(always)]
    pub(super) unsafe fn lock_cmpxchg16b(
        ptr: *mut u64,
        current: DoubleWord,
        new: DoubleWord,
    ) -> DoubleWord {
        let (lo, hi): (u64, u64);
        // SAFETY: the caller guarantees `ptr`. It is in R10 and the new low
        // word in R11, never RBX, so the swap clobbers neither. RBX is restored before
        // the block ends; flags are clobbered (no `preserves_flags`); no stack use. The
        // block is a compiler memory barrier (no `nomem`), matching the
        // hardware full barrier of a locked instruction.
        unsafe {
            asm!(
                "xchg r11, rbx",
                "lock cmpxchg16b xmmword ptr [r10]",
                "mov rbx, r11",
                in("r10") ptr,
                inout("r11") new.lo => _,
                in("rcx") new.hi,
                inout("rax") current.lo => lo,
                inout("rdx") current.hi => hi,
                options(nostack),
            );
        }
        DoubleWord { lo, hi }
    }

    /// `cmpxchg16b [ptr]` without LOCK: atomic only against interrupts on the
    /// executing CPU.
    ///
    /// # Safety
    /// As [`lock_cmpxchg16b`].
    #[inline(always)]
    pub(super) unsafe fn cmpxchg16b_local(
        ptr: *mut u64,
        current: DoubleWord,
        new: DoubleWord,
    ) -> DoubleWord {
        let (lo, hi): (u64, u64);
        // SAFETY: as in `lock_cmpxchg16b`; only the LOCK prefix differs.
        unsafe {
            asm!(
                "xchg r11, rbx",
                "cmpxchg16b xmmword ptr [r10]",
                "mov rbx, r11",
                in("r10") ptr,
                inout("r11") new.lo => _,
                in("rcx") new.hi,
                inout("rax") current.lo => lo,
                inout("rdx") current.hi => hi,
                options(nostack),
            );
        }
        DoubleWord { lo, hi }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::Ordering;

    type Cas = fn(&DwCell, DoubleWord, DoubleWord) -> Result<DoubleWord, DoubleWord>;
    const FLAVOURS: [(&str, Cas); 2] = [
        ("lock cmpxchg16b", Cmpxchg16b::compare_exchange),
        ("cmpxchg16b", Cmpxchg16b::compare_exchange_local),
    ];

    #[test]
    fn success_stores_both_words_and_returns_the_old_pair() {
        for (name, cas) in FLAVOURS {
            let cell = DwCell::new(DoubleWord::new(0x1111_2222_3333_4444, 7));
            let r = cas(
                &cell,
                DoubleWord::new(0x1111_2222_3333_4444, 7),
                DoubleWord::new(0xdead_beef_0000_0001, 8),
            );
            assert_eq!(r, Ok(DoubleWord::new(0x1111_2222_3333_4444, 7)), "{name}");
            assert_eq!(
                cell.load_lo(Ordering::Relaxed),
                0xdead_beef_0000_0001,
                "{name}: RBX half"
            );
            assert_eq!(cell.load_hi(Ordering::Relaxed), 8, "{name}: RCX half");
        }
    }

    #[test]
    fn each_half_mismatch_fails_and_reports_memory() {
        for (name, cas) in FLAVOURS {
            let cell = DwCell::new(DoubleWord::new(10, 20));
            for wrong in [DoubleWord::new(11, 20), DoubleWord::new(10, 21)] {
                let r = cas(&cell, wrong, DoubleWord::new(0, 0));
                assert_eq!(r, Err(DoubleWord::new(10, 20)), "{name}: {wrong:?}");
                assert_eq!(cell.load(), DoubleWord::new(10, 20), "{name}");
            }
        }
    }

    #[test]
    fn rbx_survives_the_swap() {
        // Many CASes in a loop whose state the compiler may keep in RBX-adjacent
        // registers: a clobbered RBX shows up as a wrong sum or a crash.
        for (name, cas) in FLAVOURS {
            let cell = DwCell::new(DoubleWord::new(0, 0));
            let mut sum = 0u64;
            for i in 0..1000u64 {
                let cur = cell.load();
                assert_eq!(
                    cas(&cell, cur, DoubleWord::new(cur.lo + i, cur.hi + 1)),
                    Ok(cur),
                    "{name}"
                );
                sum += i;
            }
            assert_eq!(cell.load(), DoubleWord::new(sum, 1000), "{name}");
        }
    }

    #[test]
    fn smp_flavour_is_atomic_across_threads() {
        let cell = DwCell::new(DoubleWord::new(0, 0));
        let (threads, iters) = if cfg!(miri) { (3, 30) } else { (4, 50_000) };
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..iters {
                        let mut cur = cell.load();
                        // lo counts, hi mirrors it: a torn or lost update breaks
                        // the equality or the total.
                        while let Err(seen) = Cmpxchg16b::compare_exchange(
                            &cell,
                            cur,
                            DoubleWord::new(cur.lo + 1, cur.hi + 1),
                        ) {
                            cur = seen;
                        }
                    }
                });
            }
        });
        let total = threads * iters;
        assert_eq!(cell.load(), DoubleWord::new(total, total));
    }
}
