//! FEAT_TLBIRANGE: `TLBI RVAE1IS` invalidates a whole range of pages by VA
//! in one instruction, broadcast to the Inner Shareable domain like
//! `TLBI VAE1IS` (Arm ARM, DDI 0487 M.a, C5.5.36 "TLBI RVAE1IS, TLBI
//! RVAE1ISNXS"; D8.17.5.2 "TLB maintenance instructions that apply to a
//! range of addresses"). The CPU reports it in `ID_AA64ISAR0_EL1.TLB`,
//! bits [59:56], = 0b0010 (D24.2.84 "ID_AA64ISAR0_EL1"); qemu's `-cpu max`
//! does.
//!
//! The operand: ASID [63:48] (0: global kernel entries match whatever the
//! ASID), TG [47:46] the granule (0b01 4K, 0b10 16K, 0b11 64K), SCALE
//! [45:44], NUM [43:39], TTL [38:37] (0b00: entries of any level), BaseADDR
//! [36:0] = VA[48:12] for the 4K granule. It covers
//! `(NUM + 1) << (5 * SCALE + 1)` granules from BaseADDR: an even number,
//! 2 to 2^21. A range is cut into at most one `TLBI VAE1IS` (an odd first
//! page) and one `TLBI RVAE1IS` per non-zero base-32 digit of the rest,
//! largest scale first: at most 5 instructions for up to 2^21 pages,
//! against one per page without the feature.

use super::Layout;
use arch_aarch64::tlbi_va_operand;
use arch_api::{PageTableLayout, VirtAddr};
use core::arch::asm;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// Granules of one range instruction with this SCALE and NUM.
const fn granules(scale: u64, num: u64) -> u64 {
    (num + 1) << (5 * scale + 1)
}

/// The most granules one instruction covers (SCALE 3, NUM 31).
const MAX_GRANULES: u64 = granules(3, 31);

/// `log2` of the live granule, and its TG code.
const SHIFT: u32 = Layout::PAGE_SIZE.trailing_zeros();
const TG: u64 = match Layout::PAGE_SIZE {
    4096 => 0b01,
    16384 => 0b10,
    _ => 0b11,
};

/// The `TLBI RVAE1IS` operand for `SCALE`/`NUM` granules from `va` (granule
/// aligned), ASID 0, TTL 0b00.
pub const fn operand(va: u64, scale: u64, num: u64) -> u64 {
    (TG << 46) | (scale << 44) | (num << 39) | ((va >> SHIFT) & ((1 << 37) - 1))
}

/// One instruction of a range's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `TLBI VAE1IS` of one granule (operand).
    Page(u64),
    /// `TLBI RVAE1IS` (operand), covering `granules` granules.
    Range(u64, u64),
}

/// The instructions invalidating `count` granules from `first` (granule
/// aligned), in order; see the module doc.
pub fn plan(first: u64, count: u64) -> impl Iterator<Item = Op> {
    let mut va = first;
    let mut left = count;
    core::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        if left % 2 == 1 {
            let op = Op::Page(tlbi_va_operand::<Layout>(VirtAddr::new(va)));
            va = va.wrapping_add(1 << SHIFT);
            left -= 1;
            return Some(op);
        }
        // The largest scale with at least one unit left (SCALE 0's unit is
        // 2 granules and `left` is even, so one is found).
        let scale = (0..4u64)
            .rev()
            .find(|&s| left >= granules(s, 0))
            .unwrap_or(0);
        let n = (left / granules(scale, 0)).min(32);
        let g = granules(scale, n - 1);
        let op = Op::Range(operand(va, scale, n - 1), g);
        va = va.wrapping_add(g << SHIFT);
        left -= g;
        Some(op)
    })
}

/// `ID_AA64ISAR0_EL1.TLB` read once: 0 not yet, 1 no, 2 yes.
static RANGE: AtomicU8 = AtomicU8::new(0);

/// Whether this CPU implements FEAT_TLBIRANGE (all CPUs of the machine are
/// the same `-cpu max`).
pub fn supported() -> bool {
    match RANGE.load(Relaxed) {
        0 => {
            let isar0: u64;
            // SAFETY: reading an ID register at EL1 has no side effects.
            unsafe {
                asm!("mrs {}, id_aa64isar0_el1", out(reg) isar0, options(nomem, nostack, preserves_flags))
            };
            let yes = (isar0 >> 56) & 0xf >= 0b0010;
            RANGE.store(if yes { 2 } else { 1 }, Relaxed);
            yes
        }
        v => v == 2,
    }
}

/// Issues `op` (no barriers: the caller puts `dsb ishst` before the list
/// and `dsb ish; isb` after it).
pub fn issue(op: Op) {
    match op {
        // SAFETY: invalidating TLB entries is memory-safe at EL1 (the walker
        // refetches from the tables).
        Op::Page(x) => unsafe {
            asm!("tlbi vae1is, {x}", x = in(reg) x, options(nostack, preserves_flags))
        },
        // SAFETY: as above; issued only where `supported()` said the
        // instruction exists (it is UNDEFINED otherwise). The assembler
        // needs the extension named (Armv8.4's TLB range instructions).
        Op::Range(x, _) => unsafe {
            asm!(
                ".arch_extension tlb-rmi",
                "tlbi rvae1is, {x}",
                x = in(reg) x,
                options(nostack, preserves_flags)
            )
        },
    }
}

/// `[start, end)` an `Op` invalidates, decoded from its operand by the
/// instruction descriptions' formulas (C5.5.36: BaseADDR sign-extended
/// from VA bit 48 — the upper half —, `(NUM + 1) << (5 * SCALE + 1)`
/// granules; `TLBI VAE1IS`: VA[55:12], one granule), independently of how
/// [`plan`] built it; `None` for a wrong TG.
fn decode(op: Op) -> Option<(u64, u64)> {
    let (base, len) = match op {
        Op::Page(x) => ((x & ((1 << 44) - 1)) << 12, 1),
        Op::Range(x, _) => {
            if (x >> 46) & 3 != TG || (x >> 37) & 3 != 0 {
                return None;
            }
            let (scale, num) = ((x >> 44) & 3, (x >> 39) & 31);
            ((x & ((1 << 37) - 1)) << SHIFT, (num + 1) << (5 * scale + 1))
        }
    };
    // Sign-extend from bit 48 for 4K granules (bit 55 of the page form).
    let base = if base >> 48 & 1 == 1 || base >> 55 & 1 == 1 {
        base | !((1 << 49) - 1)
    } else {
        base
    };
    Some((base, base.wrapping_add(len << SHIFT)))
}

/// Checks [`plan`] against [`decode`]: for every count of granules from 1
/// to 100, the powers of two to 2^22 and their neighbours, at an even and
/// an odd granule of the vmalloc window, the instructions must tile
/// exactly `[first, first + count)`, in order, with at most 1 + 4 per
/// 2^21 granules. Returns the ranges checked, or the first that failed.
pub fn check_plan() -> Result<u64, (u64, u64)> {
    let counts = (1..=100u64).chain((7..=22).flat_map(|k| [(1u64 << k) - 1, 1 << k, (1 << k) + 1]));
    let mut checked = 0;
    for count in counts {
        for first in [super::VMALLOC_START, super::VMALLOC_START + (7 << SHIFT)] {
            let mut at = first;
            let mut ops = 0u64;
            for op in plan(first, count) {
                match decode(op) {
                    Some((s, e)) if s == at => at = e,
                    _ => return Err((first, count)),
                }
                if let Op::Range(_, g) = op
                    && Some((at.wrapping_sub(g << SHIFT), at)) != decode(op)
                {
                    return Err((first, count));
                }
                ops += 1;
            }
            if at != first.wrapping_add(count << SHIFT) || ops > 5 * count.div_ceil(MAX_GRANULES) {
                return Err((first, count));
            }
            checked += 1;
        }
    }
    Ok(checked)
}

const _: () = assert!(MAX_GRANULES == 1 << 21);
