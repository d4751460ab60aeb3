//! Hooks for this workspace's own tests (feature `testing`, or the loom
//! build with `--cfg kmm_loom`). Not part of the API: an OS neither sees
//! nor implements any of this, and it may change at any time.

pub use arch_api::testing::PreemptPoint;

#[cfg(feature = "testing")]
pub use epoch::{EpochGracePeriod, NoWait, ReadGuard};
#[cfg(feature = "testing")]
pub use platform::HostedPlatform;

#[cfg(feature = "testing")]
mod epoch;

/// The deferred large-block list, for its loom model.
#[cfg(kmm_loom)]
pub use crate::kmalloc::large_list::{LargeList, Linked};

#[cfg(feature = "testing")]
mod platform {
    use crate::page_source::PageSource;
    use arch_api::sync::DefaultRawMutex;
    use arch_api::{CpuLocal, DwCas, Platform, SoftTlbCpu};
    use core::marker::PhantomData;

    /// A platform for the tests, benches and soak: the memory handle `M`
    /// (one of slub-core's page sources, e.g. `&ArenaPages`), the CPU-local
    /// backend `C` and the DW-CAS `D` chosen per test. slub-core maps
    /// nothing, so the page-table layout and the TLB are placeholders (ia64's
    /// simulated tables, the software TLB).
    pub struct HostedPlatform<M, C, D = crate::DefaultDwCas>(PhantomData<(M, C, D)>);

    // SAFETY: `M` is a `PageSource`, whose contract is the one `Mem` must
    // meet; `C` is a `CpuLocal`, which carries its own contract.
    unsafe impl<M: PageSource, C: CpuLocal, D: DwCas> Platform for HostedPlatform<M, C, D> {
        type Layout = arch_ia64_sim::Ia64Sim;
        type Mem = M;
        type Tlb = SoftTlbCpu<'static>;
        type Cpu = C;
        type Lock = DefaultRawMutex;
        type DwCas = D;
    }
}
