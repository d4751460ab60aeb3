//! CPUID probes for the features this crate relies on (Intel SDM Vol. 2A,
//! "CPUID—CPU Identification", Table 3-8 "Information Returned by CPUID").
//!
//! Not available under miri, which cannot execute CPUID.

use core::arch::x86_64::{__cpuid_count, CpuidResult};

fn cpuid(leaf: u32, subleaf: u32) -> CpuidResult {
    // SAFETY: CPUID exists on every x86_64 CPU and only reads identification
    // registers. (The intrinsic is a safe fn on current compilers but was
    // `unsafe` at the workspace's MSRV, hence the block and the allow.)
    #[allow(unused_unsafe)]
    unsafe {
        __cpuid_count(leaf, subleaf)
    }
}

fn max_leaf(base: u32) -> u32 {
    cpuid(base, 0).eax
}

/// CPUID.01H:ECX.CMPXCHG16B\[bit 13\]: [`crate::Cmpxchg16b`] may be used.
pub fn has_cmpxchg16b() -> bool {
    cpuid(1, 0).ecx & (1 << 13) != 0
}

/// CPUID.01H:EDX.PGE\[bit 13\]: global pages (CR4.PGE) are supported.
pub fn has_pge() -> bool {
    cpuid(1, 0).edx & (1 << 13) != 0
}

/// CPUID.(EAX=07H,ECX=0):EBX.INVPCID\[bit 10\]: the INVPCID instruction exists.
pub fn has_invpcid() -> bool {
    max_leaf(0) >= 7 && cpuid(7, 0).ebx & (1 << 10) != 0
}

/// CPUID.(EAX=07H,ECX=0):ECX.LA57\[bit 16\]: 5-level paging
/// ([`crate::X86_64La57`]) is supported.
pub fn has_la57() -> bool {
    max_leaf(0) >= 7 && cpuid(7, 0).ecx & (1 << 16) != 0
}

/// CPUID.80000001H:EDX.Page1GB\[bit 26\]: 1 GiB pages (PS in a PDPTE) are
/// supported.
pub fn has_1gib_pages() -> bool {
    max_leaf(0x8000_0000) >= 0x8000_0001 && cpuid(0x8000_0001, 0).edx & (1 << 26) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_x86_64_host_we_test_on_has_cmpxchg16b_and_pge() {
        // Without CX16 the DW-CAS tests would die of #UD; say why up front.
        assert!(has_cmpxchg16b(), "host CPU lacks CMPXCHG16B");
        assert!(has_pge());
        // Exercised for crashes only; the answers depend on the host.
        let _ = (has_invpcid(), has_la57(), has_1gib_pages());
    }
}
