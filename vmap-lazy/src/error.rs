//! `VmallocError`: every way `vmalloc`, `vmap`, `vfree` and `vunmap` refuse a
//! request. Nothing in this crate panics on bad input, and every error leaves
//! the allocator as it was: no half-mapped area, no leaked frame, no range
//! left reserved.

use arch_api::FrameError;
use core::fmt;
use vmap_core::VmapError;
use zap_walker::WalkError;

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VmallocError {
    /// `vmalloc(0)` or `vmap` of no frames.
    ZeroSize,
    /// The size, rounded up to whole pages, does not fit the address width.
    Overflow {
        /// The size asked for.
        size: u64,
    },
    /// No virtual range fits, even after a purge of the lazily freed areas.
    NoVirtualSpace(VmapError),
    /// The frame source ran dry (after a purge and one retry).
    OutOfFrames(FrameError),
    /// The page-table walker refused the mapping (table pages exhausted, …).
    Map(WalkError),
    /// Clearing the page-table entries failed (a walker inconsistency).
    Unmap(WalkError),
    /// No live area starts at `addr` (unknown address, an address inside an
    /// area, or a double free).
    NotFound {
        /// The address given.
        addr: u64,
    },
    /// The area at `addr` exists but was made by the other call: `vfree` of
    /// a `vmap` area or `vunmap` of a `vmalloc` area.
    WrongKind {
        /// The address given.
        addr: u64,
        /// What the area is (`"vmalloc"` or `"vmap"`).
        kind: &'static str,
    },
    /// A frame given to `vmap` is not page aligned.
    UnalignedFrame {
        /// The frame.
        frame: u64,
    },
    /// An access through the software MMU hit a guard page of a live area
    /// (an overrun, or an underflow of a stack): nothing was written.
    GuardPageHit {
        /// The address accessed.
        addr: u64,
        /// The start of the area whose guard it is.
        area: u64,
    },
    /// A [`VmFlags::NOWAIT`](crate::VmFlags::NOWAIT) request met a contended
    /// lock (or needed a purge or a page-table allocation under one);
    /// nothing changed. Retry later, or without `NOWAIT`.
    WouldBlock,
    /// The virtual-address space could not be set up.
    Setup(VmapError),
    /// The page-table walker could not be set up.
    WalkerSetup(WalkError),
}

impl fmt::Display for VmallocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroSize => write!(f, "size is 0"),
            Self::Overflow { size } => write!(f, "size {size:#x} overflows when rounded to pages"),
            Self::NoVirtualSpace(e) => write!(f, "no virtual space (after a purge): {e}"),
            Self::OutOfFrames(e) => write!(f, "no backing frames (after a purge): {e}"),
            Self::Map(e) => write!(f, "mapping failed: {e}"),
            Self::Unmap(e) => write!(f, "unmapping failed: {e}"),
            Self::NotFound { addr } => {
                write!(f, "trying to vfree() nonexistent vm area at {addr:#x}")
            }
            Self::WrongKind { addr, kind } => {
                write!(
                    f,
                    "area at {addr:#x} is a {kind} area; use the matching free call"
                )
            }
            Self::UnalignedFrame { frame } => write!(f, "frame {frame:#x} is not page aligned"),
            Self::GuardPageHit { addr, area } => {
                write!(
                    f,
                    "access at {addr:#x} hit a guard page of the area at {area:#x}"
                )
            }
            Self::WouldBlock => write!(f, "would block (a NOWAIT request met a contended lock)"),
            Self::Setup(e) => write!(f, "bad virtual range: {e}"),
            Self::WalkerSetup(e) => write!(f, "page-table walker: {e}"),
        }
    }
}

impl core::error::Error for VmallocError {}
