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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VmFlags;
    use alloc::string::ToString;
    use arch_api::VirtAddr;

    fn area(pages: u64, flags: VmFlags, large: u32, shift: u8) -> AreaInfo {
        AreaInfo {
            start: VirtAddr::new(0x20_0000),
            end: VirtAddr::new(0x20_0000 + pages * 4096),
            pages,
            caller: "f",
            kind: AreaKind::Vmalloc,
            state: AreaState::Live,
            flags,
            spare: 0,
            large_leaves: large,
            large_shift: shift,
        }
    }

    #[test]
    fn leaf_sizes_print_in_binary_units() {
        let s = |b| LeafSize(b).to_string();
        assert_eq!(
            [
                s(4096),
                s(16 << 10),
                s(2 << 20),
                s(512 << 20),
                s(1 << 30),
                s(3)
            ],
            ["4K", "16K", "2M", "512M", "1G", "3"]
        );
    }

    #[test]
    fn huge_areas_list_their_leaves_by_size() {
        let a = area(1027, VmFlags::HUGE, 2, 21);
        assert_eq!(a.leaves(), ((2 << 20, 2), (4096, 3)));
        assert_eq!(
            InfoLine(&a).to_string(),
            "0x0000000000200000-0x0000000000604000 4210688 f pages=1027 vmalloc huge leaves=2M:2,4K:3 guard=after"
        );
        // Asked for, none got: base pages only.
        let b = area(3, VmFlags::HUGE | VmFlags::NO_GUARD, 0, 0);
        assert!(
            InfoLine(&b)
                .to_string()
                .ends_with("pages=3 vmalloc huge leaves=4K:3 guard=none")
        );
        // Not asked for: the line as before.
        let c = area(3, VmFlags::empty(), 0, 0);
        assert!(
            InfoLine(&c)
                .to_string()
                .ends_with("pages=3 vmalloc guard=after")
        );
    }
}
