//! Criterion bench: one vmalloc(4 pages) / write every page / vfree round
//! trip per purge policy and free-area search (the vmalloc-loop body).

use arch_api::{CostModel, HostedCpus, PhysArena, SoftTlb, VirtAddr};
use criterion::{Criterion, criterion_group, criterion_main};
use vmap_core::GlobalVmap;
use vmap_core::{Augmented, FreeAreaSearch, FreeVmapCache, Linear};
use vmap_lazy::testing::Hosted;
use vmap_lazy::{Eager, LazyMaxPages, OneSpace, PurgePolicy, Vmalloc, VmallocMem};

type L = arch_x86_64::X86_64Pml4;
const PAGE: u64 = 4096;

fn bench_one<P: PurgePolicy + Default, F: FreeAreaSearch>(c: &mut Criterion, name: &str) {
    let arena = PhysArena::new(64 << 20, PAGE).expect("arena");
    let mem = VmallocMem::new(&arena);
    let tlb = SoftTlb::new(8, PAGE, CostModel::default());
    let space = GlobalVmap::new(
        VirtAddr::new(0xffff_c900_0000_0000),
        VirtAddr::new(0xffff_c908_0000_0000),
        PAGE,
    )
    .expect("space");
    let v: Vmalloc<'_, Hosted<'_, L>, P, OneSpace<Hosted<'_, L>, F>> =
        Vmalloc::new(&mem, space, tlb.on(0), HostedCpus::new(8), P::default()).expect("vmalloc");
    let mut i = 0usize;
    c.bench_function(name, |b| {
        b.iter(|| {
            let a = v.vmalloc(4 * PAGE).expect("vmalloc");
            for p in 0..4 {
                let va = VirtAddr::new(a.as_u64() + p * PAGE);
                v.write_byte(va, 1).expect("write");
                tlb.touch(i % 8, va);
            }
            i += 1;
            v.vfree(a).expect("vfree");
        })
    });
}

fn benches(c: &mut Criterion) {
    bench_one::<LazyMaxPages, Linear>(c, "vmalloc_loop/vanilla");
    bench_one::<Eager, Linear>(c, "vmalloc_loop/eager");
    bench_one::<LazyMaxPages, FreeVmapCache>(c, "vmalloc_loop/free-area-cache");
    bench_one::<LazyMaxPages, Augmented>(c, "vmalloc_loop/augmented");
}

criterion_group!(vmalloc, benches);
criterion_main!(vmalloc);
