//! The `--arch` choice and the dispatch from it to a monomorphised layout.

use clap::ValueEnum;

/// The page-table layouts the harness can run on (`--arch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Arch {
    /// x86_64, 4-level paging, 48-bit VA.
    #[value(name = "x86_64")]
    X86_64,
    /// x86_64, 5-level paging (LA57), 57-bit VA.
    #[value(name = "x86_64-la57")]
    X86_64La57,
    /// aarch64, 4 KiB granule, 4 levels.
    #[value(name = "aarch64-4k")]
    Aarch64_4k,
    /// aarch64, 16 KiB granule, 4 levels.
    #[value(name = "aarch64-16k")]
    Aarch64_16k,
    /// aarch64, 64 KiB granule, 3 levels.
    #[value(name = "aarch64-64k")]
    Aarch64_64k,
    /// Simulated ia64: 16 KiB pages, 4 levels, region bits.
    #[value(name = "ia64-sim")]
    Ia64Sim,
}

impl Arch {
    /// Every layout, in the order reports list them.
    pub const ALL: [Arch; 6] = [
        Arch::X86_64,
        Arch::X86_64La57,
        Arch::Aarch64_4k,
        Arch::Aarch64_16k,
        Arch::Aarch64_64k,
        Arch::Ia64Sim,
    ];
}

/// Runs `$body` with `$L` bound to the layout type of `$arch`, so workloads are
/// written once, generic over `arch_api::PageTableLayout`.
macro_rules! with_layout {
    ($arch:expr, $L:ident => $body:expr) => {
        match $arch {
            $crate::arch::Arch::X86_64 => {
                type $L = arch_x86_64::X86_64Pml4;
                $body
            }
            $crate::arch::Arch::X86_64La57 => {
                type $L = arch_x86_64::X86_64La57;
                $body
            }
            $crate::arch::Arch::Aarch64_4k => {
                type $L = arch_aarch64::Aarch64Granule4K;
                $body
            }
            $crate::arch::Arch::Aarch64_16k => {
                type $L = arch_aarch64::Aarch64Granule16K;
                $body
            }
            $crate::arch::Arch::Aarch64_64k => {
                type $L = arch_aarch64::Aarch64Granule64K;
                $body
            }
            $crate::arch::Arch::Ia64Sim => {
                type $L = arch_ia64_sim::Ia64Sim;
                $body
            }
        }
    };
}
pub(crate) use with_layout;

/// The double-word CAS this host build uses, for reports.
pub fn host_dwcas_name() -> &'static str {
    use arch_api::DwCas;
    #[cfg(target_arch = "x86_64")]
    return arch_x86_64::Cmpxchg16b::NAME;
    #[cfg(target_arch = "aarch64")]
    return arch_aarch64::Casp::NAME;
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return arch_api::LockedDwCas::NAME;
}
