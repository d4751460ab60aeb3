//! The shared backend checks of `arch_api::conformance`, run on this crate's types.

use arch_api::MapFlags;
use arch_api::conformance;
use arch_x86_64::{X86_64La57, X86_64Pml4};

/// Every flag `new_leaf` / `map_flags` round-trip exactly.
const SUPPORTED: MapFlags = MapFlags::all();

/// Samples across the user half, the direct map, vmalloc and the kernel image.
/// (`layout_geometry` asks for the end of each sample's level-1 entry, so none
/// lies in the topmost one.)
const PML4_SAMPLES: [u64; 7] = [
    0,
    0x0000_0000_0040_1000,
    0x0000_7fff_ffff_f123,
    0xffff_8000_0000_0000,
    0xffff_8880_0000_0000,
    0xffff_c900_1234_5678,
    0xffff_ffff_bfff_ffff,
];

const LA57_SAMPLES: [u64; 7] = [
    0,
    0x0000_8000_0000_0000,
    0x00ff_ffff_ffff_f000,
    0xff00_0000_0000_0000,
    0xff11_0000_0000_0000,
    0xffa0_0012_3456_789a,
    0xffff_ff7f_ffff_ffff,
];

#[test]
fn pml4_geometry() {
    conformance::layout_geometry::<X86_64Pml4>(&PML4_SAMPLES);
}

#[test]
fn la57_geometry() {
    conformance::layout_geometry::<X86_64La57>(&LA57_SAMPLES);
}

#[test]
fn pml4_entry_round_trips() {
    // A frame above 4 GiB with bits set at every alignment (2 MiB, 1 GiB).
    conformance::entry_round_trips::<X86_64Pml4>(SUPPORTED, 0x0000_0012_3456_7000);
    // The highest 52-bit frame.
    conformance::entry_round_trips::<X86_64Pml4>(SUPPORTED, 0x000f_ffff_0000_0000);
}

#[test]
fn la57_entry_round_trips() {
    conformance::entry_round_trips::<X86_64La57>(SUPPORTED, 0x0000_0012_3456_7000);
}

#[cfg(target_arch = "x86_64")]
mod dwcas {
    use arch_api::conformance;
    use arch_x86_64::Cmpxchg16b;

    #[test]
    fn cmpxchg16b_single_thread_both_flavours() {
        conformance::dwcas_single_thread::<Cmpxchg16b>();
    }

    #[test]
    fn cmpxchg16b_stress_smp_flavour() {
        if cfg!(miri) {
            conformance::dwcas_stress::<Cmpxchg16b>(3, 40);
        } else {
            conformance::dwcas_stress::<Cmpxchg16b>(8, 20_000);
        }
    }
}
