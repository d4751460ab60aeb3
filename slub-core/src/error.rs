//! Typed errors. Nothing in this crate panics on bad input: a bad pointer, a
//! corrupted freelist or a destroy with live objects comes back as one of
//! these, and only the `GlobalAlloc` adapter (which has no way to return an
//! error from `dealloc`) turns them into an abort.

use core::fmt;

/// Why a cache could not be created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheError {
    /// Object size zero, or so large that not one object fits a slab of the
    /// largest order.
    BadSize,
    /// Alignment not a power of two, or larger than a slab.
    BadAlign,
    /// The page source could not provide the per-CPU array.
    OutOfMemory,
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CacheError::BadSize => "object size is zero or too large for a slab",
            CacheError::BadAlign => "alignment is not a power of two or exceeds the slab size",
            CacheError::OutOfMemory => "no memory for the per-CPU state",
        })
    }
}

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// The page source has no memory for a new slab.
    OutOfMemory,
    /// A freelist pointer decoded to something that is neither an object
    /// boundary of its slab nor the slab's end token: memory corruption (a
    /// write after free, or an overflow from a neighbour). The pointer was
    /// not followed.
    FreelistCorrupted {
        /// The object whose stored freelist pointer was bad.
        object: usize,
        /// The decoded (bad) value.
        decoded: usize,
        /// Where in the object the freelist pointer is stored (`u32`, so the
        /// error stays three words).
        offset: u32,
    },
    /// (`debug`) A free object's poison or red zone was overwritten while it
    /// sat on the freelist (use after free). The object is not handed out.
    PoisonOverwritten {
        /// The object.
        object: usize,
        /// The first byte (from the object's start) found changed; the
        /// object's size and beyond is its red zone. (`u32`: slots are far
        /// smaller, and the error stays two words.)
        offset: u32,
    },
    /// The cache has been destroyed.
    Destroyed,
    /// (kmalloc) A size or alignment no class or page allocation can serve.
    BadLayout,
    /// (nolock) Every route that needs no waiting was empty or its lock was
    /// held (the CPU freelist, the node partial list under a try-lock);
    /// nothing was allocated. Retry from a context that may wait, or with
    /// another cache.
    WouldBlock,
    /// (krealloc) The object being moved was refused by its free (a bad
    /// pointer, or under `debug` an overwritten red zone); it is left as it
    /// was.
    Free(FreeError),
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::OutOfMemory => f.write_str("out of memory for a new slab"),
            AllocError::FreelistCorrupted {
                object,
                decoded,
                offset,
            } => write!(
                f,
                "freelist pointer at offset {offset} of object {object:#x} decodes to {decoded:#x}, not an object of its slab"
            ),
            AllocError::PoisonOverwritten { object, offset } => {
                write!(
                    f,
                    "free object {object:#x} was written after free at offset {offset}"
                )
            }
            AllocError::Destroyed => f.write_str("cache has been destroyed"),
            AllocError::BadLayout => f.write_str("size or alignment not servable"),
            AllocError::WouldBlock => {
                f.write_str("no object without waiting for a lock (nolock allocation)")
            }
            AllocError::Free(e) => write!(f, "krealloc could not free the old object: {e}"),
        }
    }
}

/// Why a free was refused. The object is left as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// Null pointer.
    Null,
    /// The pointer is not in a slab of this cache.
    ForeignPointer {
        /// The pointer.
        ptr: usize,
    },
    /// The pointer is inside a slab of this cache but not at an object boundary.
    Misaligned {
        /// The pointer.
        ptr: usize,
    },
    /// The object is already free.
    DoubleFree {
        /// The pointer.
        ptr: usize,
    },
    /// (`debug`) The object's red zone was overwritten (a buffer overflow).
    RedZoneOverwritten {
        /// The pointer.
        ptr: usize,
        /// The first red-zone byte (from the object's start) found changed:
        /// at or past the size asked for. Present with the `debug` feature,
        /// the only one that reports this error (match with `{ ptr, .. }`):
        /// a second payload word would make `Result<(), FreeError>` leave
        /// its two registers and every `free` pay for a stack slot.
        #[cfg(feature = "debug")]
        offset: u32,
    },
    /// The cache has been destroyed.
    Destroyed,
    /// (`free_deferred`) As many deferred frees are pending as the cache
    /// allows and the grace period cannot be waited for here: the object
    /// was not taken (the caller still owns it; retry after a grace period).
    DeferredBacklog {
        /// Objects waiting for a grace period.
        pending: usize,
    },
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::Null => f.write_str("free of a null pointer"),
            FreeError::ForeignPointer { ptr } => {
                write!(f, "free of {ptr:#x}, which is not an object of this cache")
            }
            FreeError::Misaligned { ptr } => {
                write!(f, "free of {ptr:#x}, which is not at an object boundary")
            }
            FreeError::DoubleFree { ptr } => write!(f, "double free of {ptr:#x}"),
            #[cfg(feature = "debug")]
            FreeError::RedZoneOverwritten { ptr, offset } => write!(
                f,
                "red zone of {ptr:#x} overwritten at offset {offset} (buffer overflow)"
            ),
            #[cfg(not(feature = "debug"))]
            FreeError::RedZoneOverwritten { ptr } => {
                write!(f, "red zone of {ptr:#x} overwritten (buffer overflow)")
            }
            FreeError::Destroyed => f.write_str("cache has been destroyed"),
            FreeError::DeferredBacklog { pending } => write!(
                f,
                "{pending} deferred frees wait for a grace period; none can be added now"
            ),
        }
    }
}

/// Why `destroy` refused or found a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestroyError {
    /// Objects are still allocated; nothing was freed under them and the
    /// cache stays usable.
    LiveObjects {
        /// How many objects remain allocated.
        remaining: usize,
    },
    /// Every object was free but some slabs could not be found to return
    /// (a lost slab: the 2014 end-token bug class).
    LeakedSlabs {
        /// Slabs obtained from the page source and not returned.
        slabs: usize,
    },
    /// The cache had already been destroyed.
    AlreadyDestroyed,
    /// Deferred frees wait for a grace period that has not elapsed and
    /// could not be waited for; nothing was freed and the cache stays
    /// usable (wait with `deferred_barrier`, then destroy).
    DeferredPending {
        /// Objects waiting for a grace period.
        objects: usize,
    },
}

impl fmt::Display for DestroyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DestroyError::LiveObjects { remaining } => {
                write!(f, "cache still has {remaining} live objects")
            }
            DestroyError::LeakedSlabs { slabs } => {
                write!(f, "{slabs} slabs could not be returned (lost slabs)")
            }
            DestroyError::AlreadyDestroyed => f.write_str("cache already destroyed"),
            DestroyError::DeferredPending { objects } => {
                write!(f, "{objects} deferred frees still wait for a grace period")
            }
        }
    }
}
