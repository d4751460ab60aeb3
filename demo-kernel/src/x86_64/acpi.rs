//! The local APIC IDs of the CPUs, from the ACPI MADT reached through the
//! PVH start info's `rsdp_paddr` (offset 32 of `hvm_start_info`).
//!
//! ACPI 6.x: the RSDP (§5.2.5) holds the RSDT address at offset 16 and,
//! from revision 2, the XSDT address at 24; both tables are a 36-byte
//! header (§5.2.6) followed by 4- (RSDT) or 8-byte (XSDT) table addresses.
//! The MADT (signature "APIC", §5.2.12) has 8 more bytes after the header,
//! then variable-length entries (type, length); type 0 is a processor local
//! APIC (ACPI processor UID, APIC ID, flags: bit 0 enabled, bit 1 online
//! capable).
//!
//! Read on the boot tables (the first GiB identity-mapped), before the
//! kernel map, which maps only the RAM of the memory map.

use super::percpu::MAX_CPUS;

/// APIC IDs, in MADT order, of the CPUs that are enabled or online capable.
pub struct Cpus {
    pub ids: [u32; MAX_CPUS],
    pub nr: usize,
}

/// Reads `T` at physical `pa`.
///
/// # Safety
/// `pa..pa + size_of::<T>()` is identity-mapped readable memory.
unsafe fn rd<T: Copy>(pa: u64) -> T {
    // SAFETY: per the caller; unaligned, as ACPI tables are byte-packed.
    unsafe { core::ptr::read_unaligned(pa as *const T) }
}

/// The MADT's CPUs, or `None` if the start info has no RSDP or no MADT
/// can be found under it.
///
/// # Safety
/// `start_info` is the PVH start info, and the ACPI tables it leads to are
/// identity-mapped (the boot tables map the first GiB; qemu's tables lie
/// below the top of RAM, 256 MiB).
pub unsafe fn cpus(start_info: u64) -> Option<Cpus> {
    const ONE_GIB: u64 = 1 << 30;
    let ok = |pa: u64| pa != 0 && pa < ONE_GIB - 4096;
    // SAFETY: the start info is identity-mapped (per the caller).
    let rsdp: u64 = unsafe { rd(start_info + 32) };
    // SAFETY: `ok` keeps every read inside the identity-mapped GiB.
    unsafe {
        if !ok(rsdp) || &rd::<[u8; 8]>(rsdp) != b"RSD PTR " {
            return None;
        }
        let (root, width) = if rd::<u8>(rsdp + 15) >= 2 && rd::<u64>(rsdp + 24) != 0 {
            (rd::<u64>(rsdp + 24), 8)
        } else {
            (u64::from(rd::<u32>(rsdp + 16)), 4)
        };
        if !ok(root) {
            return None;
        }
        let len = u64::from(rd::<u32>(root + 4));
        let mut at = root + 36;
        while at + width <= root + len.min(4096) {
            let t = if width == 8 {
                rd::<u64>(at)
            } else {
                u64::from(rd::<u32>(at))
            };
            at += width;
            if ok(t) && &rd::<[u8; 4]>(t) == b"APIC" {
                return Some(madt_cpus(t));
            }
        }
    }
    None
}

/// The local APIC entries of the MADT at `madt`.
///
/// # Safety
/// As [`cpus`]; `madt` is a MADT.
unsafe fn madt_cpus(madt: u64) -> Cpus {
    let mut out = Cpus {
        ids: [0; MAX_CPUS],
        nr: 0,
    };
    // SAFETY: inside the MADT, whose length its header gives (capped).
    unsafe {
        let end = madt + u64::from(rd::<u32>(madt + 4)).min(4096);
        let mut at = madt + 44;
        while at + 2 <= end && out.nr < MAX_CPUS {
            let (kind, len) = (rd::<u8>(at), u64::from(rd::<u8>(at + 1)));
            if len < 2 {
                break;
            }
            if kind == 0 && len >= 8 && rd::<u32>(at + 4) & 0b11 != 0 {
                out.ids[out.nr] = u32::from(rd::<u8>(at + 3));
                out.nr += 1;
            }
            at += len;
        }
    }
    out
}
