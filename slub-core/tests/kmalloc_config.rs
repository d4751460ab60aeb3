//! `Kmalloc::with_config`: each cache gets the tunables for its size.

use arch_api::PhysArena;
use slub_core::testing::HostedPlatform;
use slub_core::{ArenaPages, CacheConfig, CacheFlags, Kmalloc, ThreadCpus};

type Km<'a> = Kmalloc<HostedPlatform<&'a ArenaPages<'a>, ThreadCpus>>;

#[test]
fn with_config_applies_each_size_its_own_tunables() {
    for flags in [CacheFlags::empty(), CacheFlags::SHEAVES] {
        let a = PhysArena::new(16 << 20, 4096).unwrap();
        let pages = ArenaPages::new(&a);
        // Only kmalloc-64 is limited to 3 objects a slab.
        let km: Km = Kmalloc::with_config(&pages, ThreadCpus, flags, |size| CacheConfig {
            max_objects: if size == 64 { 3 } else { usize::MAX },
            ..CacheConfig::default()
        })
        .unwrap();
        for c in km.caches() {
            let want = c.object_size() == 64;
            assert_eq!(
                c.objects_per_slab() == 3,
                want,
                "{} holds {} a slab",
                c.object_size(),
                c.objects_per_slab()
            );
        }
        let plain: Km = Kmalloc::new(&pages, ThreadCpus, flags).unwrap();
        assert!(plain.caches().iter().all(|c| c.objects_per_slab() > 3));
    }
}
