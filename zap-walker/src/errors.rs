//! The walker's typed errors: every failure is reported, none panics.

use arch_api::{FrameError, PhysAddr, VirtAddr};
use core::fmt;

/// Why a map, zap or walker construction failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WalkError {
    /// An address or range end is not a multiple of the page size.
    Unaligned {
        /// The offending address.
        addr: VirtAddr,
    },
    /// A frame handed to `map_range` is not aligned to the page size.
    UnalignedFrame {
        /// The offending frame.
        frame: PhysAddr,
    },
    /// The range contains an address the layout does not translate (the
    /// x86_64 47/56-bit hole, aarch64 bits 63:48 neither all 0 nor all 1, …).
    NonCanonical {
        /// The first non-canonical address found.
        addr: VirtAddr,
    },
    /// `end` is below `start`, or `start + size` overflows.
    Wraps {
        /// Start of the range.
        start: VirtAddr,
    },
    /// The range leaves the window of an attached walker
    /// ([`Walker::attach`](crate::Walker::attach)); nothing was changed.
    OutsideWindow {
        /// The first address found outside.
        addr: VirtAddr,
    },
    /// `map_range` found a present mapping inside the range; nothing was changed.
    AlreadyMapped {
        /// The first mapped address found.
        addr: VirtAddr,
    },
    /// The frame source could not provide a table page. For `map_range`
    /// nothing was changed (tables are reserved before any entry is written).
    OutOfTables(FrameError),
    /// Splitting a large leaf needed a table page that the frame source could
    /// not provide. Everything below `addr` was zapped; the large leaf at
    /// `addr` is intact.
    SplitFailed {
        /// Where the zap stopped.
        addr: VirtAddr,
        /// The frame source's answer.
        error: FrameError,
    },
    /// A large leaf had to be split but the layout allows no leaf one level down.
    CannotSplit {
        /// Start of the large leaf.
        addr: VirtAddr,
    },
    /// Returning a frame or table page to the frame source failed (the zap
    /// itself completed; the first failure is reported).
    FreeFailed {
        /// The frame that was not accepted.
        frame: PhysAddr,
        /// The frame source's answer.
        error: FrameError,
    },
    /// The layout or frame source cannot be served (more than
    /// [`MAX_LEVELS`](crate::MAX_LEVELS) levels, or a frame granule larger than
    /// the page size).
    Unsupported,
    /// A consistency check of the `debug` feature failed (a table freed while
    /// not empty, or a live count that disagrees with the entries).
    Corrupt {
        /// An address translated through the inconsistent table.
        addr: VirtAddr,
    },
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalkError::Unaligned { addr } => write!(f, "address {addr:#x} is not page aligned"),
            WalkError::UnalignedFrame { frame } => {
                write!(f, "frame {frame:#x} is not page aligned")
            }
            WalkError::NonCanonical { addr } => {
                write!(f, "address {addr:#x} is not canonical for this layout")
            }
            WalkError::Wraps { start } => write!(f, "range starting at {start:#x} wraps"),
            WalkError::OutsideWindow { addr } => {
                write!(f, "{addr:#x} is outside the walker's window")
            }
            WalkError::AlreadyMapped { addr } => write!(f, "{addr:#x} is already mapped"),
            WalkError::OutOfTables(e) => write!(f, "cannot allocate a page table: {e}"),
            WalkError::SplitFailed { addr, error } => {
                write!(f, "cannot split the large leaf at {addr:#x}: {error}")
            }
            WalkError::CannotSplit { addr } => {
                write!(
                    f,
                    "the large leaf at {addr:#x} cannot be split on this layout"
                )
            }
            WalkError::FreeFailed { frame, error } => {
                write!(
                    f,
                    "returning {frame:#x} to the frame source failed: {error}"
                )
            }
            WalkError::Unsupported => {
                f.write_str("layout has too many levels or the frame granule exceeds the page size")
            }
            WalkError::Corrupt { addr } => {
                write!(f, "page-table consistency check failed near {addr:#x}")
            }
        }
    }
}
