//! `cargo xtask qemu ARCH --fault-test=wx-write|wx-exec`: W^X shown by the
//! hardware, not only by the tables' bits (`w^x:` line). The kernel writes
//! to its own text, or calls into a data page, and the exception vectors
//! must report the fault (exit status 3). Included by both ports' module
//! (`#[path]`), run once the kernel map is live.

use crate::kernel::kprint;
use core::sync::atomic::AtomicU32;

/// A return instruction in .data (an atomic, so not .rodata): if the fetch
/// were allowed the call would come straight back. aarch64 `ret`; x86_64
/// four `ret` bytes.
static RET_IN_DATA: AtomicU32 = AtomicU32::new(if cfg!(target_arch = "aarch64") {
    0xd65f_03c0
} else {
    0xc3c3_c3c3
});

/// Runs the test the build's feature selects (none: returns at once).
pub(super) fn run() {
    if cfg!(feature = "wx-write-test") {
        let text = run as fn() as usize as *mut u32;
        kprint!("wx-test: writing kernel text at {text:p}: must fault\n");
        // SAFETY: text is mapped read-only, so this faults and the vectors
        // end the run; were it writable, the word stored is the word read,
        // so the code would be unchanged.
        unsafe { text.write_volatile(text.read_volatile()) };
        kprint!("check failed: wx-test: wrote kernel text at {text:p}, no fault\n");
        super::exit(1);
    }
    if cfg!(feature = "wx-exec-test") {
        let data = RET_IN_DATA.as_ptr();
        kprint!("wx-test: calling into kernel data at {data:p}: must fault\n");
        // SAFETY: a data pointer as a function: .data is mapped
        // never-executable, so the fetch faults and the vectors end the run;
        // were it executable, the instruction there returns at once and
        // touches nothing.
        let f: extern "C" fn() = unsafe { core::mem::transmute(data) };
        f();
        kprint!("check failed: wx-test: executed kernel data at {data:p}, no fault\n");
        super::exit(1);
    }
}
