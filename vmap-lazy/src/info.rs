//! vmallocinfo: one line per area, as Linux's `/proc/vmallocinfo`:
//! `0xstart-0xend size caller pages=N state`.

use crate::area::{AreaInfo, AreaState};
use alloc::string::String;
use core::fmt::{self, Write};

/// One area, formatted like a `/proc/vmallocinfo` line.
#[derive(Clone, Copy, Debug)]
pub struct InfoLine<'a>(pub &'a AreaInfo);

impl fmt::Display for InfoLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0;
        let state = match a.state {
            AreaState::Live => a.kind.name(),
            AreaState::Lazy => "lazy",
        };
        write!(
            f,
            "{:#018x}-{:#018x} {:>8} {} pages={} {}",
            a.start.as_u64(),
            a.end.as_u64(),
            a.end.as_u64() - a.start.as_u64(),
            a.caller,
            a.pages,
            state
        )
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
