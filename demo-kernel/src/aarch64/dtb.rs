//! Just enough of the flattened device tree (devicetree spec v0.4, ch. 5:
//! big-endian header, structure block of tokens, strings block) to learn how
//! to start the other CPUs: the `/psci` node's `method` (the SMCCC conduit)
//! and the `reg` (MPIDR affinity) of every `/cpus/cpu@…` node.
//!
//! qemu `-M virt` places the DTB at the start of RAM only when it fits below
//! the ELF's lowest load address (hence the link address 0x4020_0000); it
//! does not pass its address in x0 for an ELF kernel, so it is looked for
//! there and recognised by its magic.

/// Where qemu `virt` puts the DTB for an ELF kernel linked above it.
pub const DTB_ADDR: u64 = super::RAM_START;
/// Most CPUs remembered (GICv2 has 8 CPU interfaces).
pub const MAX_CPUS: usize = super::percpu::MAX_CPUS;

const FDT_MAGIC: u32 = 0xd00d_feed;
const FDT_BEGIN_NODE: u32 = 1;
const FDT_END_NODE: u32 = 2;
const FDT_PROP: u32 = 3;
const FDT_NOP: u32 = 4;
const FDT_END: u32 = 9;

/// How PSCI is called (SMCCC: `hvc #0` or `smc #0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conduit {
    Hvc,
    Smc,
}

/// What the DTB says about the CPUs.
#[derive(Debug)]
pub struct CpuInfo {
    /// `/psci`'s `method`, if the node is there.
    pub conduit: Option<Conduit>,
    /// The `reg` of each `/cpus/cpu@…` node in tree order (the boot CPU
    /// among them).
    pub mpidrs: [u64; MAX_CPUS],
    /// How many of `mpidrs` are filled.
    pub nr: usize,
}

/// A bounds-checked view of the blob.
struct Blob<'a>(&'a [u8]);

impl Blob<'_> {
    fn u32(&self, off: usize) -> Option<u32> {
        let b = self.0.get(off..off + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The NUL-terminated string at `off`.
    fn cstr(&self, off: usize) -> Option<&[u8]> {
        let rest = self.0.get(off..)?;
        let len = rest.iter().position(|&c| c == 0)?;
        Some(&rest[..len])
    }
}

/// Parses the DTB at [`DTB_ADDR`]; `None` if there is none (bad magic) or
/// it is malformed.
pub fn cpu_info() -> Option<CpuInfo> {
    // SAFETY: RAM from RAM_START is identity-mapped normal memory and the
    // kernel never hands out the 2 MiB below its image; 40 bytes of header
    // are in RAM whatever they hold.
    let header = unsafe { core::slice::from_raw_parts(DTB_ADDR as *const u8, 40) };
    let h = Blob(header);
    if h.u32(0)? != FDT_MAGIC {
        return None;
    }
    let total = h.u32(4)? as usize;
    // The DTB must end below the image, which starts 2 MiB into RAM.
    if total > (2 << 20) {
        return None;
    }
    // SAFETY: as above, `total` bytes below the image are RAM the kernel
    // does not write.
    let all = unsafe { core::slice::from_raw_parts(DTB_ADDR as *const u8, total) };
    parse(&Blob(all), h.u32(8)? as usize, h.u32(12)? as usize)
}

fn parse(b: &Blob<'_>, structs: usize, strings: usize) -> Option<CpuInfo> {
    let mut info = CpuInfo {
        conduit: None,
        mpidrs: [0; MAX_CPUS],
        nr: 0,
    };
    // The names of the nodes on the path to the current one (depth 0 is /).
    let mut path: [&[u8]; 3] = [b"", b"", b""];
    let mut depth = 0usize;
    let mut off = structs;
    loop {
        let token = b.u32(off)?;
        off += 4;
        match token {
            FDT_BEGIN_NODE => {
                let name = b.cstr(off)?;
                off = (off + name.len() + 1).next_multiple_of(4);
                if depth < path.len() {
                    path[depth] = name;
                }
                depth += 1;
            }
            FDT_END_NODE => depth = depth.checked_sub(1)?,
            FDT_PROP => {
                let len = b.u32(off)? as usize;
                let name = b.cstr(strings + b.u32(off + 4)? as usize)?;
                let value = b.0.get(off + 8..off + 8 + len)?;
                off = (off + 8 + len).next_multiple_of(4);
                if depth == 2 && path[1] == b"psci" && name == b"method" {
                    info.conduit = match value.strip_suffix(b"\0").unwrap_or(value) {
                        b"hvc" => Some(Conduit::Hvc),
                        b"smc" => Some(Conduit::Smc),
                        _ => None,
                    };
                }
                let is_cpu = depth == 3 && path[1] == b"cpus" && path[2].starts_with(b"cpu@");
                if is_cpu && name == b"reg" && info.nr < MAX_CPUS {
                    // One or two cells (`/cpus`' #address-cells).
                    let v = Blob(value);
                    let mpidr = match len {
                        4 => v.u32(0)? as u64,
                        8 => ((v.u32(0)? as u64) << 32) | v.u32(4)? as u64,
                        _ => return None,
                    };
                    info.mpidrs[info.nr] = mpidr;
                    info.nr += 1;
                }
            }
            FDT_NOP => {}
            FDT_END => return Some(info),
            _ => return None,
        }
    }
}
