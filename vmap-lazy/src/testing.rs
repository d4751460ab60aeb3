//! Test support (features `std` + `testing`; not part of the API): the
//! hosted platform this workspace's tests, benches and harness run vmalloc
//! on.

use arch_api::sync::{DefaultRawMutex, RawMutex};
use arch_api::{
    FrameSource, HostedCpus, LockedDwCas, PageTableLayout, PhysArena, PhysMap, Platform, SoftTlbCpu,
};
use core::marker::PhantomData;

/// Frames from `M` (a `PhysArena`, or a test source over one), the
/// software TLB seen from one CPU, CPUs by declaration (`HostedCpus`),
/// tables of layout `L`, locks over `R`.
pub struct Hosted<'a, L, M = PhysArena, R = DefaultRawMutex>(PhantomData<(&'a (), L, M, R)>);

/// A frame source whose frames are RAM nobody else uses until freed,
/// reached through its own direct map: what [`Platform`]'s contract asks of
/// `Mem`.
///
/// # Safety
/// As [`Platform`]'s contract for `Mem`.
pub unsafe trait HostedMem: FrameSource + PhysMap {}

// SAFETY: a `PhysArena`'s frames are host memory handed out once until
// freed, and `phys_to_ptr` reaches each of them.
unsafe impl HostedMem for PhysArena {}

// SAFETY: `M: HostedMem` is the `Mem` contract; `HostedCpus` keeps
// `CpuLocal`'s contract.
unsafe impl<'a, L: PageTableLayout, M: HostedMem, R: RawMutex> Platform for Hosted<'a, L, M, R> {
    type Layout = L;
    type Mem = M;
    type Tlb = SoftTlbCpu<'a>;
    type Cpu = HostedCpus;
    type Lock = R;
    type DwCas = LockedDwCas;
}
