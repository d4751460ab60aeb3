//! Links the preloadable library with `-z nodelete`: `dlclose` never
//! unmaps it. A malloc cannot be unloaded anyway (its objects outlive it),
//! and arch-api's `rseq-resident` (the rseq sections left armed after they
//! end) relies on the image staying mapped.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
