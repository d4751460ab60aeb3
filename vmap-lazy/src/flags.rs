//! `VmFlags`: what a caller asks of one area beyond its size and alignment
//! (Linux's `VM_*` flags and the `gfp_t` bit vmalloc cares about).
//!
//! Every `vmalloc` / `vmap` area has one unmapped guard page after it
//! unless [`VmFlags::NO_GUARD`] says otherwise: an overrun faults instead of
//! writing into the next area. The guard is address space only: no page is
//! mapped for it and no table is built for it, so it costs no memory, only
//! one page of the window per area.

bitflags::bitflags! {
    /// Options of one allocation ([`Vmalloc::vmalloc_with`](crate::Vmalloc::vmalloc_with)).
    ///
    /// ```
    /// use vmap_lazy::VmFlags;
    /// let stack = VmFlags::GUARD_BEFORE;
    /// assert_eq!((stack.guard_pages_before(), stack.guard_pages_after()), (1, 1));
    /// assert_eq!(VmFlags::NO_GUARD.guard_pages_after(), 0);
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct VmFlags: u8 {
        /// `VM_NO_GUARD`: no guard page after the area. Dangerous: an
        /// overrun then writes into whatever is mapped next, silently. Only
        /// for areas whose users cannot overrun them (Linux uses it for
        /// early, fixed mappings).
        const NO_GUARD = 1 << 0;
        /// One more guard page *before* the area, for stacks (they grow
        /// down): an underflow faults as an overflow does.
        const GUARD_BEFORE = 1 << 1;
        /// `GFP_NOWAIT`: never wait for a contended lock and never purge
        /// synchronously; a contended front gives another node or
        /// [`VmallocError::WouldBlock`](crate::VmallocError::WouldBlock).
        /// Not recorded in the area.
        const NOWAIT = 1 << 2;
        /// `VM_ALLOW_HUGE_VMAP` ([`Vmalloc::vmalloc_huge`](crate::Vmalloc::vmalloc_huge)):
        /// map with the layout's large leaves (2 MiB on x86_64 and aarch64
        /// 4K, 32 MiB on 16K, 512 MiB on 64K) where the size and the
        /// area's alignment allow, base pages elsewhere; an area of at least
        /// one large leaf is aligned to it. A hint: without a large leaf
        /// in the layout, or with [`NOWAIT`](Self::NOWAIT), base pages.
        /// Recorded in the area (vmallocinfo prints `huge`).
        const HUGE = 1 << 3;
    }
}

impl VmFlags {
    /// The flags an area keeps (its guard layout, whether it asked for
    /// large leaves).
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) const AREA: Self = Self::NO_GUARD.union(Self::GUARD_BEFORE).union(Self::HUGE);

    /// Unmapped guard pages before the area.
    pub const fn guard_pages_before(self) -> u64 {
        self.contains(Self::GUARD_BEFORE) as u64
    }

    /// Unmapped guard pages after the area.
    pub const fn guard_pages_after(self) -> u64 {
        !self.contains(Self::NO_GUARD) as u64
    }

    /// Guard pages in all.
    pub const fn guard_pages(self) -> u64 {
        self.guard_pages_before() + self.guard_pages_after()
    }
}
