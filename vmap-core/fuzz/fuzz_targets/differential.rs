//! `cargo +nightly fuzz run differential` (from vmap-core/): the five
//! policies and `Blocks`' tree on its own (`BlockTree`) against the
//! brute-force reference model, driven by fuzzer bytes.
//! Every operation's result must agree; the `debug` feature checks every
//! invariant after each operation.
#![no_main]

#[path = "../../tests/common/mod.rs"]
mod common;

use common::{Reference, Req, span};
use libfuzzer_sys::fuzz_target;
use vmap_core::block_tree::BlockTree;
use vmap_core::{
    AllocRequest, Augmented, BTree, Blocks, FreeAreaSearch, FreeVmapCache, Linear, VecSource, VirtAddr,
    VmapSpace,
};

const P: u64 = 0x1000;
const BASE: u64 = 0x4000_0000;
const PAGES: u64 = 256;

fn space<F: FreeAreaSearch>() -> VmapSpace<F, VecSource> {
    VmapSpace::new(
        VirtAddr::new(BASE),
        VirtAddr::new(BASE + PAGES * P),
        P,
        VecSource::new(),
    )
    .unwrap()
}

fuzz_target!(|data: &[u8]| {
    let mut lin = space::<Linear>();
    let mut fac = space::<FreeVmapCache>();
    let mut aug = space::<Augmented>();
    let mut bt = space::<BTree>();
    let mut bl = space::<Blocks>();
    let mut blk = BlockTree::new(BASE, BASE + PAGES * P, P).unwrap();
    let mut reference = Reference::new(BASE, BASE + PAGES * P, P);
    for op in data.chunks_exact(6) {
        let b = |i: usize| u64::from(op[i]);
        if op[0] & 1 == 0 {
            let size = (b(1) % 64) * P; // 0 pages: exercises ZeroSize
            let align = P << (b(2) % 9);
            let phase = if b(2) & 0x80 != 0 {
                (b(3) % (align / P)) * P
            } else {
                0
            };
            let nocross = if b(3) & 0x80 != 0 {
                size.next_power_of_two() << (b(3) % 3)
            } else {
                0
            };
            let vstart = BASE + (b(4) % PAGES) * P;
            let vend = (vstart + (b(5) + 1) * P).min(BASE + PAGES * P + (op[0] as u64 >> 7) * P);
            let exact = (op[0] & 2 != 0).then_some(vstart);
            let r = Req {
                size,
                align,
                phase,
                nocross,
                vstart,
                vend,
                exact,
            };
            let mut q = AllocRequest::new(size, align, VirtAddr::new(vstart), VirtAddr::new(vend))
                .phase(phase)
                .nocross(nocross);
            if let Some(a) = exact {
                q.exact = Some(VirtAddr::new(a));
                q.vstart = VirtAddr::new(a);
                q.vend = VirtAddr::new(a.wrapping_add(size));
            }
            let want = reference.alloc(&r);
            assert_eq!(lin.alloc_request(&q).map(|a| span(&a).0), want);
            assert_eq!(fac.alloc_request(&q).map(|a| span(&a).0), want);
            assert_eq!(aug.alloc_request(&q).map(|a| span(&a).0), want);
            assert_eq!(bt.alloc_request(&q).map(|a| span(&a).0), want);
            assert_eq!(bl.alloc_request(&q).map(|a| span(&a).0), want);
            assert_eq!(blk.alloc_request(&q), want);
        } else {
            let addr = if reference.busy.is_empty() || op[0] & 2 != 0 {
                BASE + (b(1) % PAGES) * P
            } else {
                reference.busy[(b(1) as usize) % reference.busy.len()].0
            };
            let want = reference.free(addr);
            let a = VirtAddr::new(addr);
            assert_eq!(lin.find_unlink(a).map(|x| span(&x)), want);
            assert_eq!(fac.free_two_search(a).map(|x| span(&x)), want);
            assert_eq!(aug.free(a).map(|x| span(&x)), want);
            assert_eq!(bt.find_unlink(a).map(|x| span(&x)), want);
            assert_eq!(bl.free(a).map(|x| span(&x)), want);
            assert_eq!(blk.free(addr), want.map(|(s, e)| e - s));
        }
    }
});
