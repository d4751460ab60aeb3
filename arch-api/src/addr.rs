//! Address newtypes, so a virtual address cannot be passed where a physical one
//! is expected.

use core::fmt;

macro_rules! address_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(u64);

        impl $name {
            /// Wraps a raw address. No check is made: layouts decide what is canonical.
            pub const fn new(addr: u64) -> Self {
                Self(addr)
            }

            /// The raw value.
            pub const fn as_u64(self) -> u64 {
                self.0
            }

            /// Rounds down to a multiple of `align` (a power of two).
            pub const fn align_down(self, align: u64) -> Self {
                debug_assert!(align.is_power_of_two());
                Self(self.0 & !(align - 1))
            }

            /// Rounds up to a multiple of `align` (a power of two); `None` on overflow.
            pub const fn align_up(self, align: u64) -> Option<Self> {
                debug_assert!(align.is_power_of_two());
                match self.0.checked_add(align - 1) {
                    Some(v) => Some(Self(v & !(align - 1))),
                    None => None,
                }
            }

            /// Whether the address is a multiple of `align` (a power of two).
            pub const fn is_aligned(self, align: u64) -> bool {
                self.0 & (align - 1) == 0
            }

            /// `self + off`, `None` on overflow.
            pub const fn checked_add(self, off: u64) -> Option<Self> {
                match self.0.checked_add(off) {
                    Some(v) => Some(Self(v)),
                    None => None,
                }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }

        impl fmt::LowerHex for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.0, f)
            }
        }
    };
}

address_type!(
    /// A virtual address. Whether it is canonical depends on the layout
    /// ([`PageTableLayout::is_canonical`](crate::PageTableLayout::is_canonical)).
    VirtAddr
);
address_type!(
    /// A physical address, as stored in page-table entries and handed out by a
    /// [`FrameSource`](crate::FrameSource).
    PhysAddr
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn alignment_helpers() {
        let a = VirtAddr::new(0x1234);
        assert_eq!(a.align_down(0x1000), VirtAddr::new(0x1000));
        assert_eq!(a.align_up(0x1000), Some(VirtAddr::new(0x2000)));
        assert!(!a.is_aligned(0x1000));
        assert!(VirtAddr::new(0x2000).is_aligned(0x1000));
        assert_eq!(VirtAddr::new(u64::MAX).align_up(0x1000), None);
        assert_eq!(PhysAddr::new(u64::MAX).checked_add(1), None);
        assert_eq!(format!("{:?}", PhysAddr::new(0x10)), "PhysAddr(0x10)");
    }
}
