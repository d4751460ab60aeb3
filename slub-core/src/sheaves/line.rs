//! One CPU's sheaves line. The main sheaf's slot array and fill count sit
//! in the line itself, so a pop or push reads one line and then the slot:
//! no load of the sheaf's header on the way. The header's count is stale
//! while the sheaf is main and is written back when it stops being main
//! ([`take_main`](CpuSheaves::take_main)); the spare's header is always
//! current. Without a main sheaf the count is [`NO_SHEAF_SIZE`], above
//! every capacity, so the fast paths' one bounds check misses and they need
//! no null test. Protected by the CPU's guard (or the backend's guard-free
//! steps, which write only `size` and read `slots` and `cap`).

use crate::barn::{NO_SHEAF_SIZE, Sheaf, SheafSize};
use crate::sync::UnsafeCellPtr;
use core::cell::UnsafeCell;
use core::ptr::null_mut;

#[repr(C, align(64))]
pub(super) struct CpuSheaves {
    /// Slot 0 of the main sheaf (null without one).
    slots: UnsafeCellPtr<usize>,
    /// The main sheaf's fill count (`NO_SHEAF_SIZE` without one).
    size: SheafSize,
    /// The cache's sheaf capacity (0 for a line no cache uses, which turns
    /// the guard-free steps off): in the line the steps read anyway, so
    /// that they need no load from the cache.
    cap: UnsafeCell<usize>,
    main: UnsafeCellPtr<Sheaf>,
    /// The spare sheaf, or null.
    pub(super) spare: UnsafeCellPtr<Sheaf>,
}

// The backend's guard-free steps read a CPU's stack as three words at the
// start of its line (`arch_api::LocalStacks`).
const _: () = assert!(core::mem::offset_of!(CpuSheaves, slots) == 0);
#[cfg(not(kmm_loom))]
const _: () = assert!(core::mem::offset_of!(CpuSheaves, size) == 8);
#[cfg(not(kmm_loom))]
const _: () = assert!(core::mem::offset_of!(CpuSheaves, cap) == 16);

impl CpuSheaves {
    /// A line without sheaves.
    pub(super) fn new() -> Self {
        Self {
            slots: UnsafeCellPtr::null(),
            size: SheafSize::new(NO_SHEAF_SIZE),
            cap: UnsafeCell::new(0),
            main: UnsafeCellPtr::null(),
            spare: UnsafeCellPtr::null(),
        }
    }

    /// Sets the capacity the guard-free steps see.
    ///
    /// # Safety
    /// Nothing uses the line (the cache is being built).
    pub(super) unsafe fn set_cap(&self, cap: usize) {
        // SAFETY: the caller's contract.
        unsafe { *self.cap.get() = cap };
    }

    /// The main sheaf (null without one). Its header's count is stale.
    ///
    /// # Safety
    /// Under the guard of this CPU (or exclusive access).
    #[inline(always)]
    pub(super) unsafe fn main(&self) -> *mut Sheaf {
        // SAFETY: the caller's contract.
        unsafe { self.main.get() }
    }

    /// The main sheaf's fill count (`NO_SHEAF_SIZE` without one).
    ///
    /// # Safety
    /// As [`main`](Self::main).
    #[inline(always)]
    pub(super) unsafe fn size(&self) -> usize {
        self.size.get()
    }

    /// Sets the main sheaf's fill count.
    ///
    /// # Safety
    /// As [`main`](Self::main); there is a main sheaf and `n` is at most its
    /// capacity.
    #[inline(always)]
    pub(super) unsafe fn set_size(&self, n: usize) {
        self.size.set(n);
    }

    /// Slot `i` of the main sheaf.
    ///
    /// # Safety
    /// As [`set_size`](Self::set_size), with `i` below the capacity.
    #[inline(always)]
    pub(super) unsafe fn slot(&self, i: usize) -> *mut usize {
        // SAFETY: the caller's contract: `slots` is the main sheaf's slot
        // array of at least `i + 1` slots.
        unsafe { self.slots.get().add(i) }
    }

    /// Detaches the main sheaf, its header's count brought up to date;
    /// the CPU has none after. Null if it had none.
    ///
    /// # Safety
    /// As [`main`](Self::main).
    pub(super) unsafe fn take_main(&self) -> *mut Sheaf {
        // SAFETY: the caller's contract; a non-null main is a live sheaf.
        unsafe {
            let s = self.main.get();
            if !s.is_null() {
                Sheaf::set_size(s, self.size.get());
                self.main.set(null_mut());
                self.slots.set(null_mut());
                self.size.set(NO_SHEAF_SIZE);
            }
            s
        }
    }

    /// Makes `s` the main sheaf (its header's count current). The CPU has
    /// no main sheaf.
    ///
    /// # Safety
    /// As [`main`](Self::main); `s` is a live sheaf owned by the caller.
    pub(super) unsafe fn put_main(&self, s: *mut Sheaf) {
        debug_assert!(!s.is_null());
        // SAFETY: the caller's contract.
        unsafe {
            debug_assert!(self.main.get().is_null());
            self.main.set(s);
            self.slots.set(Sheaf::slot(s, 0));
            self.size.set(Sheaf::size(s));
        }
    }

    /// Swaps the main sheaf (which must exist) with sheaf `s`, which
    /// becomes main; returns the old main, its header current.
    ///
    /// # Safety
    /// As [`put_main`](Self::put_main), except that the CPU has a main
    /// sheaf.
    pub(super) unsafe fn replace_main(&self, s: *mut Sheaf) -> *mut Sheaf {
        // SAFETY: the caller's contract.
        unsafe {
            let old = self.take_main();
            self.put_main(s);
            old
        }
    }
}
