//! The bootstrap arena: serves the calls made while the caches are being
//! set up (the initialising thread re-entering `malloc`). A static block
//! with a bump pointer; its blocks are never reused (`free` ignores them),
//! and each keeps its size in the 16 bytes before it for `realloc`.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

const BYTES: usize = 256 << 10;

#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; BYTES]>);
// SAFETY: disjoint ranges are handed out by an atomic bump pointer.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; BYTES]));
static NEXT: AtomicUsize = AtomicUsize::new(0);

fn base() -> usize {
    ARENA.0.get() as usize
}

/// `size` bytes aligned to `align` (at most 4096), or null when full.
pub fn alloc(size: usize, align: usize) -> *mut u8 {
    let align = align.clamp(16, 4096);
    let mut cur = NEXT.load(Ordering::Relaxed);
    loop {
        let user = (base() + cur + 16).next_multiple_of(align);
        let end = user + size;
        if end > base() + BYTES {
            return core::ptr::null_mut();
        }
        match NEXT.compare_exchange_weak(cur, end - base(), Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                // SAFETY: `user - 16 .. end` is ours now, inside the arena.
                unsafe { ((user - 16) as *mut usize).write(size) };
                return user as *mut u8;
            }
            Err(seen) => cur = seen,
        }
    }
}

/// The size of block `p` if it is one of the arena's.
pub fn size_of(p: usize) -> Option<usize> {
    if p >= base() + 16 && p < base() + BYTES {
        // SAFETY: a block of ours keeps its size 16 bytes before it.
        Some(unsafe { ((p - 16) as *const usize).read() })
    } else {
        None
    }
}
