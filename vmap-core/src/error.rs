//! `VmapError`: every way a request can be refused. Nothing in this crate
//! panics on bad input; each refusal leaves the allocator unchanged.

use core::fmt;

/// Why an allocation, a free or a construction was refused.
///
/// Every error leaves the allocator exactly as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmapError {
    /// `size` was 0.
    ZeroSize,
    /// A size, alignment, phase, `nocross` or address is not a multiple of the
    /// page size.
    NotPageMultiple {
        /// Which parameter (`"size"`, `"align"`, `"phase"`, `"nocross"`,
        /// `"addr"`, `"start"`, `"end"`, `"vstart"`, `"vend"`).
        what: &'static str,
        /// The value given.
        value: u64,
        /// The space's page size.
        page_size: u64,
    },
    /// The alignment is not a power of two.
    AlignNotPowerOfTwo {
        /// The value given.
        align: u64,
    },
    /// The page size given to a constructor is 0 or not a power of two.
    BadPageSize {
        /// The value given.
        page_size: u64,
    },
    /// `vstart >= vend` (or `start >= end` for a new space).
    EmptyRange {
        /// Start of the range.
        vstart: u64,
        /// End of the range (exclusive).
        vend: u64,
    },
    /// `vstart + size` (or `addr + size`) overflows the address width.
    Overflow {
        /// Start of the range.
        vstart: u64,
        /// Requested size.
        size: u64,
    },
    /// `[vstart, vend)` is not inside the space `[start, end)`.
    OutsideSpace {
        /// Start of the requested range.
        vstart: u64,
        /// End of the requested range.
        vend: u64,
        /// Start of the space.
        start: u64,
        /// End of the space.
        end: u64,
    },
    /// `phase >= align`.
    PhaseTooLarge {
        /// The phase given.
        phase: u64,
        /// The alignment given.
        align: u64,
    },
    /// `nocross` is non-zero but smaller than `size`.
    NocrossTooSmall {
        /// The boundary given.
        nocross: u64,
        /// The size requested.
        size: u64,
    },
    /// `nocross` is non-zero and not a power of two.
    NocrossNotPowerOfTwo {
        /// The boundary given.
        nocross: u64,
    },
    /// The node source could not supply a tree node.
    NodePoolExhausted,
    /// No free block satisfies the request. The caller may purge lazily
    /// freed areas and retry (vmap-lazy's job).
    NoSpace {
        /// Size asked for.
        size: u64,
        /// Alignment asked for.
        align: u64,
        /// Start of the range searched.
        vstart: u64,
        /// End of the range searched (exclusive).
        vend: u64,
    },
    /// No busy area starts at `addr` (unknown address or double free).
    NotFound {
        /// The address given.
        addr: u64,
    },
    /// A non-blocking request ([`VmapNodes::try_alloc_on`]) found every lock
    /// it could use held; nothing changed.
    ///
    /// [`VmapNodes::try_alloc_on`]: crate::VmapNodes::try_alloc_on
    WouldBlock,
}

impl fmt::Display for VmapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroSize => write!(f, "size is 0"),
            Self::NotPageMultiple {
                what,
                value,
                page_size,
            } => write!(
                f,
                "{what} {value:#x} is not a multiple of the page size {page_size:#x}"
            ),
            Self::AlignNotPowerOfTwo { align } => {
                write!(f, "align {align:#x} is not a power of two")
            }
            Self::BadPageSize { page_size } => {
                write!(f, "page size {page_size:#x} is not a power of two")
            }
            Self::EmptyRange { vstart, vend } => {
                write!(f, "empty range: vstart {vstart:#x} >= vend {vend:#x}")
            }
            Self::Overflow { vstart, size } => {
                write!(f, "vstart {vstart:#x} + size {size:#x} overflows")
            }
            Self::OutsideSpace {
                vstart,
                vend,
                start,
                end,
            } => write!(
                f,
                "range [{vstart:#x}, {vend:#x}) is outside the space [{start:#x}, {end:#x})"
            ),
            Self::PhaseTooLarge { phase, align } => {
                write!(f, "phase {phase:#x} >= align {align:#x}")
            }
            Self::NocrossTooSmall { nocross, size } => {
                write!(f, "nocross {nocross:#x} is smaller than size {size:#x}")
            }
            Self::NocrossNotPowerOfTwo { nocross } => {
                write!(f, "nocross {nocross:#x} is not a power of two")
            }
            Self::NodePoolExhausted => write!(f, "tree node pool exhausted"),
            Self::NoSpace {
                size,
                align,
                vstart,
                vend,
            } => write!(
                f,
                "no free area of size {size:#x} align {align:#x} in [{vstart:#x}, {vend:#x})"
            ),
            Self::NotFound { addr } => {
                write!(f, "trying to vfree() nonexistent vm area at {addr:#x}")
            }
            Self::WouldBlock => write!(f, "every usable lock is contended (non-blocking request)"),
        }
    }
}

impl core::error::Error for VmapError {}
