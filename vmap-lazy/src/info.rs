//! vmallocinfo: one line per area, as Linux's `/proc/vmallocinfo` prints
//! them: the range the area holds (guard pages included, as Linux's
//! `vm_struct` size is), its size, then
//!
//! * `caller pages=N vmalloc|vmap guard=…` for a live area, the guard state
//!   last (`after`, `before+after` for a stack, `none` for
//!   [`VmFlags::NO_GUARD`](crate::VmFlags::NO_GUARD); Linux prints none);
//!   an area that asked for large leaves
//!   ([`VmFlags::HUGE`](crate::VmFlags::HUGE)) adds `huge` and its leaves
//!   by size before the guard: `vmalloc huge leaves=2M:32,4K:3 guard=after`
//!   (Linux prints neither);
//! * `vm_map_ram` for a live vmap block;
//! * `unpurged vm_area` for a lazily freed area waiting for its purge.

use crate::area::{AreaInfo, AreaKind, AreaState};
use alloc::string::String;
use core::fmt::{self, Write};

/// One area, formatted like a `/proc/vmallocinfo` line.
#[derive(Clone, Copy, Debug)]
pub struct InfoLine<'a>(pub &'a AreaInfo);

impl InfoLine<'_> {
    /// The guard state vmallocinfo prints: `after`, `before+after` or
    /// `none`.
    pub fn guard(&self) -> &'static str {
        let f = self.0.flags;
        match (f.guard_pages_before(), f.guard_pages_after()) {
            (0, 0) => "none",
            (0, _) => "after",
            (_, 0) => "before",
            _ => "before+after",
        }
    }
}

/// `bytes` as vmallocinfo's leaf sizes print it: `4K`, `2M`, `1G`.
pub(crate) struct LeafSize(pub(crate) u64);

impl fmt::Display for LeafSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        match b.trailing_zeros() {
            30.. => write!(f, "{}G", b >> 30),
            20.. => write!(f, "{}M", b >> 20),
            10.. => write!(f, "{}K", b >> 10),
            _ => write!(f, "{b}"),
        }
    }
}

impl fmt::Display for InfoLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0;
        let (s, e) = a.reserved();
        let (s, e) = (s.as_u64(), e.as_u64());
        write!(f, "{s:#018x}-{e:#018x} {:>7} ", e - s)?;
        match (a.state, a.kind) {
            (AreaState::Lazy, _) => write!(f, "unpurged vm_area"),
            (AreaState::Live, AreaKind::VmapBlock) => write!(f, "vm_map_ram"),
            (AreaState::Live, k) => {
                write!(f, "{} pages={} {}", a.caller, a.pages, k.name())?;
                if a.flags.contains(crate::VmFlags::HUGE) {
                    let ((ls, ln), (ps, pn)) = a.leaves();
                    write!(f, " huge leaves=")?;
                    if ln > 0 {
                        write!(f, "{}:{ln},", LeafSize(ls))?;
                    }
                    write!(f, "{}:{pn}", LeafSize(ps))?;
                }
                write!(f, " guard={}", self.guard())
            }
        }
    }
}

/// The whole listing, one line per area in address order.
pub fn vmallocinfo(areas: &[AreaInfo]) -> String {
    let mut s = String::new();
    for a in areas {
        // Writing to a String cannot fail.
        let _ = writeln!(s, "{}", InfoLine(a));
    }
    s
}
