//! The [`Platform`] seam: what an OS supplies, named once.
//!
//! Every shipped type of the family is generic over one platform type
//! (`Vmalloc<'_, MyKernel>`, `KmemCache<MyKernel>`, `Kmalloc<MyKernel>`);
//! its associated types say which page-table format, frames and direct
//! map, TLB flusher, CPU-local access, raw lock and double-word CAS the
//! kernel has. Policies (when to purge, how to search free space) stay
//! separate parameters with defaults.
//!
//! ```
//! use arch_api::sync::DefaultRawMutex;
//! use arch_api::{LockedDwCas, PageTableLayout, PhysArena, Platform, SoftTlbCpu, ThreadCpus};
//! use core::marker::PhantomData;
//!
//! /// A hosted stand-in for a kernel: frames from a `PhysArena`, the
//! /// software TLB, one thread per CPU, tables of layout `L` (a backend
//! /// crate's, e.g. `arch_x86_64::X86_64Pml4`).
//! struct MyKernel<'a, L>(PhantomData<(&'a (), L)>);
//!
//! // SAFETY: a `PhysArena`'s frames are host memory nobody else uses until
//! // freed, and its direct map reaches every one of them; `ThreadCpus`
//! // upholds `CpuLocal`'s contract.
//! unsafe impl<'a, L: PageTableLayout> Platform for MyKernel<'a, L> {
//!     type Layout = L;
//!     type Mem = &'a PhysArena;
//!     type Tlb = SoftTlbCpu<'a>;
//!     type Cpu = ThreadCpus;
//!     type Lock = DefaultRawMutex;
//!     type DwCas = LockedDwCas;
//! }
//! ```

use crate::cpu::CpuLocal;
use crate::dwcas::DwCas;
use crate::frame::{FrameSource, PhysMap};
use crate::layout::PageTableLayout;
use crate::sync::RawMutex;
use crate::tlb::TlbFlush;

/// Everything the family asks of an OS, as associated types. The values
/// (the frame allocator, the TLB flusher, the CPU-local access) are passed
/// to each constructor; the platform type itself is usually an empty type.
///
/// # Safety
///
/// [`Mem`](Self::Mem)'s frames are RAM that nobody else uses from the
/// moment [`FrameSource::alloc`] hands them out until they are freed, and
/// its [`PhysMap::phys_to_ptr`] gives a pointer valid for reads and writes
/// of every such frame ([`PhysMap::ptr_to_phys`] going back to the same
/// frame): page tables, vmalloc's backing pages and slab pages are written
/// through it. `Mem` does not allocate through an allocator built on it
/// (a slab `#[global_allocator]`'s frames come from elsewhere), which would
/// re-enter that allocator under its own guard. [`Cpu`](Self::Cpu) upholds
/// [`CpuLocal`]'s contract.
pub unsafe trait Platform {
    /// The page-table format of the kernel's tables (vmalloc's window).
    type Layout: PageTableLayout;
    /// The frame allocator and the direct map, as one handle (a reference,
    /// or a zero-sized type that reaches a static): vmalloc's backing pages
    /// and page tables, slab pages, large kmalloc.
    type Mem: FrameSource + PhysMap;
    /// Invalidates TLB entries on every CPU (the OS's shootdown IPI).
    type Tlb: TlbFlush;
    /// The calling CPU and the guard that keeps a task on it.
    type Cpu: CpuLocal;
    /// The raw lock the crates' locks are built on (an IRQ-safe spinlock
    /// where interrupts allocate).
    type Lock: RawMutex;
    /// The double-word CAS of the slab fast path.
    type DwCas: DwCas;
}
