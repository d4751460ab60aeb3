//! CPU-local access: the [`CpuLocal`] seam now lives in arch-api (every
//! crate of the family shares it through the platform); here are the hosted
//! backends (`ThreadCpus`, each thread a CPU, moved to arch-api with it).

pub use arch_api::CpuLocal;

#[cfg(feature = "std")]
pub mod migrating;
