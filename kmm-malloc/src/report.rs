//! Messages without allocating: a stack buffer written to stderr, and the
//! `KMM_SLUB_STATS=1` report run from `.fini_array` at exit.

use core::sync::atomic::Ordering;
use slub_core::StatItem;

/// A fixed buffer implementing `fmt::Write` (output past its end is cut).
pub struct Buf {
    bytes: [u8; 512],
    len: usize,
}

impl Buf {
    pub fn new() -> Self {
        Self {
            bytes: [0; 512],
            len: 0,
        }
    }

    /// Writes the buffer to fd 2 and empties it.
    pub fn flush_to_stderr(&mut self) {
        // SAFETY: the first `len` bytes are ours and initialised.
        unsafe { libc::write(2, self.bytes.as_ptr().cast(), self.len) };
        self.len = 0;
    }
}

impl core::fmt::Write for Buf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// The report: per cache its slabinfo line, the fast and slow paths taken,
/// the per-CPU CAS retries per million operations; then the region.
fn print_stats() {
    use core::fmt::Write;
    if !crate::STATS_AT_EXIT.load(Ordering::Relaxed) {
        return;
    }
    let Some(km) = crate::kmalloc() else {
        return;
    };
    let mut b = Buf::new();
    let front = if crate::SHEAVES.load(Ordering::Relaxed) {
        "sheaves"
    } else {
        "tid"
    };
    let _ = writeln!(b, "kmm-malloc stats (front {front}):");
    b.flush_to_stderr();
    for c in km.caches() {
        let s = c.stats();
        let ops = s.get(StatItem::AllocFastpath)
            + s.get(StatItem::AllocSlowpath)
            + s.get(StatItem::FreeFastpath)
            + s.get(StatItem::FreeSlowpath);
        if ops == 0 {
            continue;
        }
        let fails = s.get(StatItem::CmpxchgDoubleCpuFail);
        let _ = writeln!(b, "{}", c.slabinfo());
        b.flush_to_stderr();
        let _ = writeln!(
            b,
            "  alloc fast {} slow {}, free fast {} slow {} remote {}, full slab made partial: to the CPU {} to the node {}, cpu cas retries {} ({} per M ops), sheaf refill {} flush {}",
            s.get(StatItem::AllocFastpath),
            s.get(StatItem::AllocSlowpath),
            s.get(StatItem::FreeFastpath),
            s.get(StatItem::FreeSlowpath),
            s.get(StatItem::FreeRemote),
            s.get(StatItem::CpuPartialFree),
            s.get(StatItem::FreeAddPartial),
            fails,
            fails.saturating_mul(1_000_000) / ops.max(1),
            s.get(StatItem::SheafRefill),
            s.get(StatItem::SheafFlush),
        );
        b.flush_to_stderr();
    }
    let _ = writeln!(
        b,
        "region: {} KiB in use, {} KiB freed but resident",
        crate::REGION.in_use() >> 10,
        crate::REGION.cached() >> 10
    );
    b.flush_to_stderr();
}

extern "C" fn at_exit() {
    print_stats();
}

// Run by the dynamic loader when the library is unloaded (at exit): no
// registration call that could allocate.
#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = at_exit;
