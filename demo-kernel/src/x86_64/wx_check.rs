//! The boot-time proof of W^X on the kernel map: every leaf's effective
//! rights (Intel SDM Vol. 3A §4.6, "Access Rights": a supervisor write needs
//! R/W = 1 at every level once CR0.WP = 1; a fetch needs XD = 0 at every
//! level once IA32_EFER.NXE = 1) counted, and the two control bits read
//! back, since without them the table bits mean nothing.

use super::paging::KERNEL_ROOT;
use arch_api::{EntryKind, PageTableEntry, PageTableLayout};
use arch_x86_64::{Pml4Entry, X86_64Pml4};
use core::arch::asm;
use core::sync::atomic::Ordering;

type L = X86_64Pml4;

const RW: u64 = 1 << 1;
const XD: u64 = 1 << 63;
const CR0_WP: u64 = 1 << 16;
const EFER: u32 = 0xc000_0080;
const EFER_NXE: u64 = 1 << 11;

/// Leaves by effective rights; `wx` (writable and executable) must be 0.
#[derive(Default)]
pub struct WxReport {
    pub rx: u64,
    pub ro: u64,
    pub rw_nx: u64,
    pub wx: u64,
    pub cr0_wp: bool,
    pub efer_nxe: bool,
}

impl WxReport {
    pub fn ok(&self) -> bool {
        self.wx == 0 && self.cr0_wp && self.efer_nxe
    }
}

/// `writable` / `exec`: what the levels above allow.
fn walk(table: u64, level: usize, writable: bool, exec: bool, r: &mut WxReport) {
    for i in 0..512 {
        // SAFETY: `table` is a live table of the kernel map, identity-mapped
        // RAM; reading an entry changes nothing.
        let raw = unsafe { (table as *const u64).add(i).read_volatile() };
        let e = Pml4Entry::from_raw(raw);
        let (w, x) = (writable && raw & RW != 0, exec && raw & XD == 0);
        match e.kind(level) {
            EntryKind::None => {}
            EntryKind::Table => walk(e.addr().as_u64(), level + 1, w, x, r),
            EntryKind::Leaf => match (w, x) {
                (true, true) => r.wx += 1,
                (false, true) => r.rx += 1,
                (false, false) => r.ro += 1,
                (true, false) => r.rw_nx += 1,
            },
        }
    }
}

/// Walks the live kernel map (boot CPU, after `paging::init`).
pub fn run() -> WxReport {
    let mut r = WxReport::default();
    walk(KERNEL_ROOT.load(Ordering::Relaxed), 0, true, true, &mut r);
    debug_assert_eq!(L::LEVELS, 4);
    let (cr0, lo, hi): (u64, u32, u32);
    // SAFETY: CPL 0; reading CR0 and IA32_EFER has no side effects.
    unsafe {
        asm!("mov {}, cr0", out(reg) cr0, options(nomem, nostack, preserves_flags));
        asm!("rdmsr", in("ecx") EFER, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags));
    }
    r.cr0_wp = cr0 & CR0_WP != 0;
    r.efer_nxe = (u64::from(hi) << 32 | u64::from(lo)) & EFER_NXE != 0;
    r
}
