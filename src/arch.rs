//! Architectures: the machine an image's programs and modules are built for,
//! named as `uname -m` names it, with what goes with it (the EFI stub's
//! name, the PE machine type). An image is built for its root's
//! architecture, whatever machine composer runs on: the root's programs are
//! read as ELF files and never run.

use std::collections::BTreeMap;
use std::path::Path;

use crate::resolve::elf::parse::{
    EM_386, EM_AARCH64, EM_ARM, EM_LOONGARCH, EM_PPC64, EM_RISCV, EM_S390, EM_X86_64,
};
use crate::resolve::root::Root;

/// An ELF machine with its class and byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    pub machine: u16,
    pub bits64: bool,
    pub little: bool,
}

/// The architecture names [`Arch::name`] gives and manifests may use.
pub const NAMES: [&str; 8] = [
    "x86_64",
    "i686",
    "aarch64",
    "armv7l",
    "riscv64",
    "ppc64le",
    "s390x",
    "loongarch64",
];

/// Debian's names of the same architectures, which manifests may use too.
pub const DEBIAN_NAMES: [&str; 8] = [
    "amd64", "i386", "arm64", "armhf", "riscv64", "ppc64el", "s390x", "loong64",
];

/// PE machine types (IMAGE_FILE_MACHINE_*).
pub const PE_AMD64: u16 = 0x8664;
pub const PE_I386: u16 = 0x014c;
pub const PE_ARM64: u16 = 0xaa64;
pub const PE_RISCV64: u16 = 0x5064;
pub const PE_LOONGARCH64: u16 = 0x6264;

impl Arch {
    pub const X86_64: Arch = Arch::new(EM_X86_64, true, true);
    pub const AARCH64: Arch = Arch::new(EM_AARCH64, true, true);
    pub const RISCV64: Arch = Arch::new(EM_RISCV, true, true);

    const fn new(machine: u16, bits64: bool, little: bool) -> Arch {
        Arch {
            machine,
            bits64,
            little,
        }
    }

    /// The architecture of an ELF file from its first 20 bytes; None for
    /// anything else.
    pub fn of_elf(head: &[u8]) -> Option<Arch> {
        if head.len() < 20 || &head[..4] != b"\x7fELF" {
            return None;
        }
        let bits64 = match head[4] {
            1 => false,
            2 => true,
            _ => return None,
        };
        let little = match head[5] {
            1 => true,
            2 => false,
            _ => return None,
        };
        let m = [head[18], head[19]];
        let machine = if little {
            u16::from_le_bytes(m)
        } else {
            u16::from_be_bytes(m)
        };
        Some(Arch::new(machine, bits64, little))
    }

    /// The machine composer runs on.
    pub fn host() -> Arch {
        let abi = crate::resolve::elf::search::host_abi();
        Arch::new(
            abi.machine,
            abi.class == crate::resolve::elf::parse::Class::Elf64,
            abi.endian == crate::resolve::elf::parse::Endian::Little,
        )
    }

    /// A name from [`NAMES`] (what `uname -m` prints on such a machine), or
    /// Debian's name for the architecture (`amd64`, `arm64`, `armhf`, ...).
    pub fn from_name(name: &str) -> Option<Arch> {
        Some(match name {
            "x86_64" | "amd64" => Arch::X86_64,
            "i686" | "i386" => Arch::new(EM_386, false, true),
            "aarch64" | "arm64" => Arch::AARCH64,
            "armv7l" | "armhf" => Arch::new(EM_ARM, false, true),
            "riscv64" => Arch::RISCV64,
            "ppc64le" | "ppc64el" => Arch::new(EM_PPC64, true, true),
            "s390x" => Arch::new(EM_S390, true, false),
            "loongarch64" | "loong64" => Arch::new(EM_LOONGARCH, true, true),
            _ => return None,
        })
    }

    /// As `uname -m` names it (`x86_64`, `aarch64`, `riscv64`), else the
    /// ELF machine number.
    pub fn name(&self) -> String {
        NAMES
            .iter()
            .find(|n| Arch::from_name(n) == Some(*self))
            .map_or_else(
                || {
                    format!(
                        "ELF machine {} ({}-bit, {} endian)",
                        self.machine,
                        if self.bits64 { 64 } else { 32 },
                        if self.little { "little" } else { "big" }
                    )
                },
                |n| n.to_string(),
            )
    }

    /// An x86 CPU (the only ones with early microcode the kernel loads from
    /// the initrd).
    pub fn is_x86(&self) -> bool {
        self.machine == EM_X86_64 || self.machine == EM_386
    }

    /// systemd's EFI stub for this architecture (`linuxx64.efi.stub`).
    pub fn efi_stub(&self) -> Option<&'static str> {
        Some(match self.pe_machine()? {
            PE_AMD64 => "linuxx64.efi.stub",
            PE_I386 => "linuxia32.efi.stub",
            PE_ARM64 => "linuxaa64.efi.stub",
            PE_RISCV64 => "linuxriscv64.efi.stub",
            PE_LOONGARCH64 => "linuxloongarch64.efi.stub",
            _ => return None,
        })
    }

    /// The PE machine type of this architecture's EFI programs.
    pub fn pe_machine(&self) -> Option<u16> {
        Some(match (self.machine, self.bits64) {
            (EM_X86_64, true) => PE_AMD64,
            (EM_386, false) => PE_I386,
            (EM_AARCH64, true) => PE_ARM64,
            (EM_RISCV, true) => PE_RISCV64,
            (EM_LOONGARCH, true) => PE_LOONGARCH64,
            _ => return None,
        })
    }

    /// The architecture of a root: that of its first program found among
    /// the ones every root has one of (its init, its shell). None for a root
    /// without any (a directory of data files).
    pub fn of_root(root: &Path) -> Option<Arch> {
        const PROGRAMS: [&str; 8] = [
            "/usr/lib/systemd/systemd",
            "/sbin/init",
            "/usr/bin/sh",
            "/bin/sh",
            "/usr/bin/busybox",
            "/bin/busybox",
            "/usr/bin/env",
            "/usr/bin/ls",
        ];
        let r = Root::new(root);
        PROGRAMS.iter().find_map(|p| {
            let host = r.resolve(Path::new(p), true).ok()?;
            let mut head = [0u8; 20];
            let f = std::fs::File::open(host).ok()?;
            if !f.metadata().ok()?.is_file() {
                return None;
            }
            let got = crate::io::read_full_at(&f, &mut head, 0).ok()?;
            Arch::of_elf(&head[..got])
        })
    }
}

/// A PE machine type's name (`x86_64` for 0x8664).
pub fn pe_machine_name(m: u16) -> String {
    match m {
        PE_AMD64 => "x86_64".into(),
        PE_I386 => "i686".into(),
        PE_ARM64 => "aarch64".into(),
        PE_RISCV64 => "riscv64".into(),
        PE_LOONGARCH64 => "loongarch64".into(),
        _ => format!("PE machine {m:#06x}"),
    }
}

/// How many ELF files of each architecture an image (or a tree) holds:
/// programs and libraries apart from kernel modules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    pub programs: BTreeMap<Arch, usize>,
    pub modules: BTreeMap<Arch, usize>,
}

impl Census {
    /// Counts the ELF file `name` whose first bytes are `head`.
    pub fn add(&mut self, name: &[u8], head: &[u8]) {
        let Some(a) = Arch::of_elf(head) else { return };
        let module = name.ends_with(b".ko");
        *if module {
            &mut self.modules
        } else {
            &mut self.programs
        }
        .entry(a)
        .or_default() += 1;
    }

    /// The architecture most ELF files are built for (programs first, then
    /// modules); None for an image without any.
    pub fn main(&self) -> Option<Arch> {
        let top = |m: &BTreeMap<Arch, usize>| m.iter().max_by_key(|(_, n)| **n).map(|(a, _)| *a);
        top(&self.programs).or_else(|| top(&self.modules))
    }

    /// Every architecture seen, each once.
    pub fn all(&self) -> Vec<Arch> {
        let mut v: Vec<Arch> = self
            .programs
            .keys()
            .chain(self.modules.keys())
            .copied()
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// `aarch64 (412 programs and libraries, 388 modules)`, or for a mix
    /// each architecture with its counts.
    pub fn describe(&self) -> String {
        let all = self.all();
        if all.is_empty() {
            return "no ELF files".into();
        }
        all.iter()
            .map(|a| {
                let p = self.programs.get(a).copied().unwrap_or(0);
                let m = self.modules.get(a).copied().unwrap_or(0);
                format!(
                    "{} ({p} {}, {m} module{})",
                    a.name(),
                    if p == 1 {
                        "program or library"
                    } else {
                        "programs and libraries"
                    },
                    if m == 1 { "" } else { "s" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(class: u8, data: u8, machine: u16) -> Vec<u8> {
        let mut h = b"\x7fELF".to_vec();
        h.extend([class, data, 1, 0]);
        h.extend([0u8; 8]);
        h.extend([2, 0]);
        if data == 1 {
            h.extend(machine.to_le_bytes());
        } else {
            h.extend(machine.to_be_bytes());
        }
        h
    }

    #[test]
    fn names_round_trip_and_headers_are_read() {
        for (n, d) in NAMES.iter().zip(DEBIAN_NAMES) {
            assert_eq!(Arch::from_name(n).unwrap().name(), *n);
            assert_eq!(Arch::from_name(d), Arch::from_name(n));
        }
        assert_eq!(Arch::of_elf(&header(2, 1, 183)), Some(Arch::AARCH64));
        assert_eq!(Arch::of_elf(&header(2, 2, 22)).unwrap().name(), "s390x");
        assert_eq!(Arch::of_elf(&header(3, 1, 62)), None);
        assert_eq!(Arch::of_elf(b"\x7fELF"), None);
        assert_eq!(
            Arch::of_elf(&header(2, 1, 9999)).unwrap().name(),
            "ELF machine 9999 (64-bit, little endian)"
        );
        assert_eq!(Arch::AARCH64.efi_stub(), Some("linuxaa64.efi.stub"));
        assert_eq!(Arch::X86_64.pe_machine(), Some(PE_AMD64));
        assert_eq!(pe_machine_name(PE_ARM64), "aarch64");
        assert!(!Arch::AARCH64.is_x86());
        assert_eq!(Arch::from_name("arm64"), Some(Arch::AARCH64));
        assert_eq!(Arch::from_name("amd64"), Some(Arch::X86_64));
        assert_eq!(Arch::from_name("sparc"), None);
    }

    #[test]
    fn a_census_names_the_main_architecture() {
        let mut c = Census::default();
        c.add(b"usr/bin/sh", &header(2, 1, 183));
        c.add(b"usr/lib/libc.so.6", &header(2, 1, 183));
        c.add(b"usr/lib/modules/6.1/kernel/x.ko", &header(2, 1, 183));
        c.add(b"usr/bin/odd", &header(2, 1, 62));
        c.add(b"etc/text", b"hello, world, not an ELF file");
        assert_eq!(c.main(), Some(Arch::AARCH64));
        assert_eq!(
            c.describe(),
            "x86_64 (1 program or library, 0 modules), aarch64 (2 programs and libraries, 1 module)"
        );
    }
}
