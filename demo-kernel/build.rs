//! Picks the linker script for bare-metal targets (`link-<arch>.ld`); hosted
//! builds link normally.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    println!("cargo:rerun-if-changed=build.rs");
    if os != "none" {
        return;
    }
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = format!("{dir}/link-{arch}.ld");
    println!("cargo:rerun-if-changed={script}");
    println!("cargo:rustc-link-arg-bins=-T{script}");
    if arch == "x86_64" {
        // x86_64-unknown-none links static-PIE by default; the PVH entry is
        // 32-bit code with absolute addresses (R_X86_64_32) and nothing
        // applies dynamic relocations, so link a fixed-address ET_EXEC.
        println!("cargo:rustc-link-arg-bins=--no-pie");
    }
}
