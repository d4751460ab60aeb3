//! Shared pieces of the zap-walker workloads (`munmap`, `unmap-dense`):
//! `--size` parsing and where a range is placed on each layout.

use arch_api::{PageTableLayout, VirtAddr};

/// Parses a byte count with an optional K, M, G or T suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, shift) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 30),
        Some('T' | 't') => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let n: u64 = num.parse().map_err(|_| {
        format!("'{s}' is not a byte count (digits with an optional K, M, G or T suffix)")
    })?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{s}' overflows 64 bits"))
}

/// A page-aligned start for a `size`-byte range on layout `L`: one level-1
/// entry into the address space (off the zero page, not on a root
/// boundary), in region 5 on ia64-sim (where Linux put vmalloc). `None` when
/// the range does not fit in the canonical low part.
pub fn range_start<L: PageTableLayout>(size: u64) -> Option<u64> {
    let base = if L::NAME == "ia64-sim" {
        (5u64 << 61) + L::entry_span(1)
    } else {
        L::entry_span(1)
    };
    let size = size.div_ceil(L::PAGE_SIZE) * L::PAGE_SIZE;
    let last = base.checked_add(size)?.checked_sub(1)?;
    let span0 = L::entry_span(0);
    // Every root-entry piece must be canonical (as the walker checks).
    let mut a = base;
    while a <= last {
        if !L::is_canonical(VirtAddr::new(a)) {
            return None;
        }
        a = match (a & !(span0 - 1)).checked_add(span0) {
            Some(n) => n,
            None => break,
        };
    }
    L::is_canonical(VirtAddr::new(last)).then_some(base)
}
