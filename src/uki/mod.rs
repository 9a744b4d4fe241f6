//! Unified kernel images: systemd's EFI stub with the kernel, the initrd, the
//! command line, the OS release and the kernel's version added as PE sections
//! (`composer build --uki`), and the sections of one read back, so that
//! `inspect`, `extract`, `cat` and `verify` work on the initrd inside.

pub mod pcr;
pub mod pe;
pub mod sbat;
pub mod sign;
pub mod versions;

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::arch::Arch;
use crate::error::{Error, Result};
use crate::resolve::root::Root;

pub use pe::Section;
pub use versions::{PROFILES_SINCE, UCODE_SINCE};

/// The largest kernel, stub, splash or device tree composer puts in a UKI.
const PART_LIMIT: u64 = 512 << 20;
/// The largest text section (`.cmdline`, `.osrel`, `.uname`) read back.
const TEXT_LIMIT: u32 = 64 << 10;

/// What a UKI holds besides its initrd.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Info {
    pub sections: Vec<Section>,
    pub cmdline: Option<String>,
    pub uname: Option<String>,
    /// PRETTY_NAME (else NAME) of its `.osrel`.
    pub os: Option<String>,
    /// The `ID=` of each `.profile` section, in order (`#N` for one without).
    pub profiles: Vec<String>,
}

/// The file starts like a PE program (a UKI, a stub), not like an initrd.
pub fn looks_like_pe(head: &[u8]) -> bool {
    head.starts_with(b"MZ")
}

fn read_exact_at(file: &File, name: &str, at: u64, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let got = crate::io::read_full_at(file, &mut buf, at).map_err(|e| Error::io(name, e))?;
    buf.truncate(got);
    Ok(buf)
}

/// Reads a UKI of `len` bytes: what it holds, and its initrd's bytes. An error
/// names what is wrong with it (not a PE program, no `.initrd`, a section past
/// the end of the file).
pub fn read(file: &File, len: u64, name: &str) -> Result<(Info, Vec<u8>)> {
    let not_uki = |why: String| {
        Error::usage(format!("{name}: {why}"))
            .with_hint("give the initrd, or a unified kernel image holding one")
    };
    let head = read_exact_at(file, name, 0, pe::HEADERS_READ.min(len as usize))?;
    let sections = pe::sections(&head).map_err(not_uki)?;
    for s in &sections {
        if u64::from(s.offset) + u64::from(s.size) > len {
            return Err(not_uki(format!(
                "its `{}` section ends at byte {}, past the end of the file ({len} bytes)",
                s.name,
                u64::from(s.offset) + u64::from(s.size)
            )));
        }
    }
    let text = |want: &str| -> Result<Option<String>> {
        match sections.iter().find(|s| s.name == want) {
            None => Ok(None),
            Some(s) => {
                let b =
                    read_exact_at(file, name, s.offset.into(), s.size.min(TEXT_LIMIT) as usize)?;
                let t = String::from_utf8_lossy(&b);
                Ok(Some(t.trim_end_matches(['\0', '\n', ' ']).to_string()))
            }
        }
    };
    let cmdline = text(".cmdline")?;
    let uname = text(".uname")?;
    let os = text(".osrel")?.and_then(|t| os_name(&t));
    let mut profiles = Vec::new();
    for (n, s) in sections.iter().filter(|s| s.name == ".profile").enumerate() {
        let b = read_exact_at(file, name, s.offset.into(), s.size.min(TEXT_LIMIT) as usize)?;
        let t = String::from_utf8_lossy(&b);
        let id = t.lines().find_map(|l| {
            let v = l.trim().strip_prefix("ID=")?;
            Some(v.trim_matches(['"', '\'', '\0']).to_string())
        });
        profiles.push(id.unwrap_or_else(|| format!("#{n}")));
    }
    let Some(initrd) = sections.iter().find(|s| s.name == ".initrd") else {
        let names: Vec<&str> = sections.iter().map(|s| s.name.as_str()).collect();
        return Err(not_uki(format!(
            "a PE program without an `.initrd` section (it has {})",
            names.join(", ")
        )));
    };
    let bytes = read_exact_at(file, name, initrd.offset.into(), initrd.size as usize)?;
    Ok((
        Info {
            sections,
            cmdline,
            uname,
            os,
            profiles,
        },
        bytes,
    ))
}

/// PRETTY_NAME, else NAME, of an os-release text.
fn os_name(osrel: &str) -> Option<String> {
    let field = |key: &str| {
        osrel.lines().find_map(|l| {
            let v = l.trim().strip_prefix(key)?.strip_prefix('=')?;
            Some(v.trim_matches(['"', '\'']).to_string())
        })
    };
    field("PRETTY_NAME").or_else(|| field("NAME"))
}

/// What goes into a UKI besides the initrd.
#[derive(Clone, Debug)]
pub struct Parts {
    /// systemd's EFI stub (`linuxx64.efi.stub`).
    pub stub: PathBuf,
    /// The kernel image (`vmlinuz`).
    pub kernel: PathBuf,
    pub cmdline: String,
    /// The root's os-release, if it has one.
    pub osrel: Option<Vec<u8>>,
    /// The kernel's version, as `uname -r` will print it.
    pub uname: String,
    pub splash: Option<PathBuf>,
    pub devicetree: Option<PathBuf>,
    /// The architecture of the image's programs, when known: the stub and
    /// the kernel must be EFI programs of it.
    pub arch: Option<Arch>,
    /// SBAT lines to add to the stub's, the kernel's and composer's.
    pub sbat: Vec<String>,
    /// Signed PCR 11 policies to add (`.pcrpkey`, `.pcrsig`).
    pub pcr: Option<PcrSigning>,
    /// CPU microcode archives, concatenated (each padded to four bytes):
    /// `.ucode` with a stub that has it, else first in `.initrd`.
    pub microcode: Vec<u8>,
    /// Profiles: one UKI, several command lines (none: the base alone).
    pub profiles: Vec<Profile>,
}

/// One profile of a UKI: what a boot loader lists (`ID`, `TITLE`) and the
/// command line the stub runs the kernel with when it is chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub id: String,
    pub title: Option<String>,
    pub cmdline: String,
}

/// The systemd version of a stub (its `.sdmagic`), when it says one.
pub fn stub_version(stub: &[u8]) -> Option<u32> {
    pe::section_data(stub, ".sdmagic").and_then(pcr::stub_version)
}

/// A profile's ID as systemd-boot makes an entry's ID of it (`FILE@ID`, in
/// lower case): letters, digits, `.`, `_` and `-`, 1 to 64 of them, not
/// only digits (a number names a profile by its place).
pub fn check_profile_id(id: &str) -> std::result::Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b".-_".contains(&b))
        && !id.bytes().all(|b| b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{id}` is not a profile ID: 1 to 64 lower-case letters, digits, `.`, `_` or `-`, \
             not only digits"
        ))
    }
}

/// The `.profile` section of `p`: os-release style `ID=` and `TITLE=`.
fn profile_section(p: &Profile) -> Vec<u8> {
    let mut s = format!("ID={}\n", p.id);
    if let Some(t) = &p.title {
        s.push_str(&format!(
            "TITLE=\"{}\"\n",
            t.replace(['"', '\\', '\n'], " ")
        ));
    }
    s.into_bytes()
}

/// What the stub of systemd `version` can carry of `parts`: profiles need
/// 257, and are refused before (a stub that does not know them boots the
/// base alone, every profile's command line lost); microcode goes to
/// `.ucode` from 256, else first in `.initrd` (true).
fn stub_takes(parts: &Parts, version: Option<u32>) -> Result<bool> {
    let at_least = |since: u32| version.is_some_and(|v| v >= since);
    if !parts.profiles.is_empty() {
        if !at_least(PROFILES_SINCE) {
            return Err(Error::usage(format!(
                "the EFI stub `{}` ({}) has no UKI profiles: they need systemd {PROFILES_SINCE}'s \
                 stub or later",
                parts.stub.display(),
                version.map_or(
                    "a systemd version it does not say".to_string(),
                    |v| format!("systemd {v}")
                )
            ))
            .with_hint("give a newer stub with --stub, or build one UKI a command line"));
        }
        if parts.pcr.is_some() {
            return Err(Error::usage(
                "signed PCR 11 policies are made for a UKI without profiles: each profile \
                 measures its own sections",
            )
            .with_hint("leave out [uki] profiles, or the PCR key"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for p in &parts.profiles {
            check_profile_id(&p.id).map_err(|e| {
                Error::usage(e).with_hint("name each profile as systemd-boot lists it")
            })?;
            if !seen.insert(p.id.as_str()) {
                return Err(
                    Error::usage(format!("two UKI profiles are named `{}`", p.id))
                        .with_hint("give each profile its own ID"),
                );
            }
        }
    }
    Ok(!parts.microcode.is_empty() && at_least(UCODE_SINCE))
}

/// The key PCR 11 policies are signed with, and the phases they are for.
#[derive(Clone, Debug)]
pub struct PcrSigning {
    pub key: pcr::PcrKey,
    pub phases: Vec<String>,
}

/// Where the root keeps systemd's stub for `arch` (Debian's
/// systemd-boot-efi: `linuxx64.efi.stub`, `linuxaa64.efi.stub`), links
/// followed inside the root.
pub fn default_stub(root: &Path, arch: Arch) -> PathBuf {
    let name = arch.efi_stub().unwrap_or("linuxx64.efi.stub");
    let inside = Path::new("/usr/lib/systemd/boot/efi").join(name);
    Root::new(root)
        .resolve(&inside, true)
        .unwrap_or_else(|_| root.join(inside.strip_prefix("/").unwrap_or(&inside)))
}

/// The name the stub's own `.sbat` section keeps in a UKI: its lines are in
/// the UKI's merged `.sbat`.
pub const STUB_SBAT: &str = ".sbat-0";

/// The PE machine type of an EFI program, or of an x86 bzImage without
/// one (amd64).
fn machine_of(what: &str, path: &Path, bytes: &[u8]) -> Result<u16> {
    if let Some(m) = pe::machine(bytes) {
        return Ok(m);
    }
    if bytes.get(0x202..0x206) == Some(b"HdrS".as_slice()) {
        return Ok(crate::arch::PE_AMD64);
    }
    Err(Error::usage(format!(
        "the {what} `{}` is neither an x86 bzImage nor an EFI program",
        path.display()
    ))
    .with_hint(if what == "kernel" {
        "name the kernel image (vmlinuz) with --kernel"
    } else {
        "give systemd's EFI stub (Debian: systemd-boot-efi) with --stub"
    }))
}

/// The stub, the kernel and the image are for one machine: a stub of
/// another architecture cannot start the kernel, and a kernel of another
/// architecture cannot run the image's programs.
fn check_machines(parts: &Parts, stub: &[u8], kernel: &[u8]) -> Result<()> {
    let s = machine_of("EFI stub", &parts.stub, stub)?;
    let k = machine_of("kernel", &parts.kernel, kernel)?;
    if s != k {
        let wanted = Arch::from_name(&crate::arch::pe_machine_name(k))
            .and_then(|a| a.efi_stub())
            .unwrap_or("the stub of the kernel's architecture");
        return Err(Error::usage(format!(
            "the EFI stub `{}` is for {} and the kernel `{}` for {}",
            parts.stub.display(),
            crate::arch::pe_machine_name(s),
            parts.kernel.display(),
            crate::arch::pe_machine_name(k)
        ))
        .with_hint(format!(
            "give the kernel's architecture's stub with --stub ({wanted})"
        )));
    }
    if let Some(a) = parts.arch {
        if a.pe_machine().is_some_and(|m| m != k) {
            return Err(Error::usage(format!(
                "the kernel `{}` is for {} and the image's programs for {}",
                parts.kernel.display(),
                crate::arch::pe_machine_name(k),
                a.name()
            ))
            .with_hint(format!(
                "name a kernel for {} with --kernel, or build from a root of the kernel's architecture",
                a.name()
            )));
        }
    }
    Ok(())
}

/// The root's os-release (`/etc/os-release`, else `/usr/lib/os-release`),
/// links followed inside the root.
pub fn root_osrel(root: &Path) -> Option<Vec<u8>> {
    let r = Root::new(root);
    ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .filter_map(|p| r.resolve(Path::new(p), true).ok())
        .find_map(|p| crate::stack::read_bounded(&p, TEXT_LIMIT as usize))
}

fn read_part(what: &str, path: &Path, hint: &str) -> Result<Vec<u8>> {
    crate::io::read_regular(path, PART_LIMIT).map_err(|e| {
        Error::usage(format!("the {what} `{}`: {e}", path.display())).with_hint(hint.to_string())
    })
}

/// The UKI: the stub with `.osrel`, `.cmdline`, `.uname`, `.splash`, `.dtb`,
/// `.ucode`, `.initrd` and `.linux` (in that order, the kernel last as ukify
/// puts it), then each profile's `.profile` and `.cmdline`.
pub fn assemble(parts: &Parts, initrd: &[u8]) -> Result<Vec<u8>> {
    let stub = read_part(
        "EFI stub",
        &parts.stub,
        "install systemd's stub (Debian: systemd-boot-efi), or name one with --stub",
    )?;
    let kernel = read_part(
        "kernel",
        &parts.kernel,
        "name the kernel image with --kernel",
    )?;
    check_machines(parts, &stub, &kernel)?;
    let ucode = stub_takes(parts, stub_version(&stub))?;
    // A stub without `.ucode`: the microcode first in `.initrd`, where the
    // kernel looks for it.
    let joined;
    let initrd = if parts.microcode.is_empty() || ucode {
        initrd
    } else {
        joined = [parts.microcode.as_slice(), initrd].concat();
        joined.as_slice()
    };
    // One .sbat of the stub's, the kernel's, composer's and the user's lines;
    // the stub's own section stays under another name, so shim reads one.
    let sbat = sbat::merge(
        pe::section_data(&stub, ".sbat"),
        pe::section_data(&kernel, ".sbat"),
        &parts.sbat,
    )?;
    let mut stub = stub;
    pe::rename_section(&mut stub, ".sbat", STUB_SBAT)
        .map_err(|e| Error::usage(format!("the EFI stub `{}`: {e}", parts.stub.display())))?;
    let splash = match &parts.splash {
        Some(p) => Some(read_part("splash", p, "give a BMP image")?),
        None => None,
    };
    let dtb = match &parts.devicetree {
        Some(p) => Some(read_part("device tree", p, "give a .dtb file")?),
        None => None,
    };
    let mut cmdline = parts.cmdline.clone().into_bytes();
    cmdline.push(0);
    let mut uname = parts.uname.clone().into_bytes();
    uname.push(0);
    let mut add: Vec<(&str, &[u8])> = Vec::new();
    add.push((".sbat", sbat.as_bytes()));
    if let Some(o) = &parts.osrel {
        add.push((".osrel", o));
    }
    add.push((".cmdline", &cmdline));
    add.push((".uname", &uname));
    if let Some(s) = &splash {
        add.push((".splash", s));
    }
    if let Some(d) = &dtb {
        add.push((".dtb", d));
    }
    if let Some(p) = &parts.pcr {
        add.push((".pcrpkey", &p.key.public_pem));
    }
    if ucode {
        add.push((".ucode", &parts.microcode));
    }
    add.push((".initrd", initrd));
    add.push((".linux", &kernel));
    // Each profile: its `.profile`, and its command line where it is not the
    // base's (the stub takes a profile's sections over the base's).
    let profiles: Vec<(Vec<u8>, Option<Vec<u8>>)> = parts
        .profiles
        .iter()
        .map(|p| {
            let own = (p.cmdline != parts.cmdline).then(|| {
                let mut c = p.cmdline.clone().into_bytes();
                c.push(0);
                c
            });
            (profile_section(p), own)
        })
        .collect();
    for (section, cmdline) in &profiles {
        add.push((".profile", section));
        if let Some(c) = cmdline {
            add.push((".cmdline", c));
        }
    }
    let stub_error = |e: String| {
        Error::usage(format!("the EFI stub `{}`: {e}", parts.stub.display())).with_hint(
            "give systemd's EFI stub (linuxx64.efi.stub, linuxaa64.efi.stub) with --stub",
        )
    };
    let uki = pe::append_sections(&stub, &add).map_err(stub_error)?;
    let Some(p) = &parts.pcr else {
        return Ok(uki);
    };
    // The policies: PCR 11 as the stub will measure this very image.
    let json = p.key.sign(&measured(&uki)?, &p.phases)?;
    pe::append_sections(&uki, &[(".pcrsig", json.as_bytes())]).map_err(stub_error)
}

/// The sections of `uki` the stub measures into PCR 11, in its order, each
/// as it is mapped (its virtual size, zeros past its data in the file).
fn measured(uki: &[u8]) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let sections = pe::sections(&uki[..uki.len().min(pe::HEADERS_READ)])
        .map_err(|e| Error::usage(format!("the UKI just made: {e}")))?;
    let version = pe::section_data(uki, ".sdmagic").and_then(pcr::stub_version);
    let mut out = Vec::new();
    for name in pcr::measured_sections(version) {
        let Some(s) = sections.iter().find(|s| s.name == name) else {
            continue;
        };
        if s.virtual_size == 0 {
            continue;
        }
        let at = s.offset as usize;
        let mut data = uki
            .get(at..at + s.size as usize)
            .ok_or_else(|| {
                Error::usage(format!(
                    "the UKI just made: its `{name}` section is past its end"
                ))
            })?
            .to_vec();
        data.resize(s.virtual_size as usize, 0);
        out.push((name, data));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut t = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut t, bytes).unwrap();
        let f = File::open(t.path()).unwrap();
        (t, f)
    }

    #[test]
    fn a_uki_is_read_back_and_a_broken_one_is_an_error() {
        let stub = pe::tiny_pe(0x400);
        let uki = pe::append_sections(
            &stub,
            &[
                (".osrel", b"NAME=Test\n"),
                (".cmdline", b"root=/dev/vda\0"),
                (".initrd", b"070701 the archive"),
            ],
        )
        .unwrap();
        let (_t, f) = file_of(&uki);
        let (info, initrd) = read(&f, uki.len() as u64, "uki.efi").unwrap();
        assert_eq!(initrd, b"070701 the archive");
        assert_eq!(info.cmdline.as_deref(), Some("root=/dev/vda"));
        assert_eq!(info.os.as_deref(), Some("Test"));
        assert_eq!(info.uname, None);
        // Cut short: the .initrd section ends past the end of the file.
        let cut = &uki[..uki.len() - 505];
        let (_t, f) = file_of(cut);
        let e = read(&f, cut.len() as u64, "cut.efi")
            .unwrap_err()
            .to_string();
        assert!(e.contains("past the end of the file"), "{e}");
        // A PE program without an initrd (the stub itself).
        let (_t, f) = file_of(&stub);
        let e = read(&f, stub.len() as u64, "stub.efi")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("without an `.initrd` section (it has .text)"),
            "{e}"
        );
        // Not a PE at all, past its MZ.
        let (_t, f) = file_of(b"MZ and nothing else");
        let e = read(&f, 19, "mz.bin").unwrap_err().to_string();
        assert!(e.contains("mz.bin: not a PE file"), "{e}");
    }

    /// The stub, the kernel and the image's programs must be of one machine.
    #[test]
    fn a_stub_and_kernel_of_other_machines_are_refused() {
        let x64 = pe::tiny_pe(0x400);
        assert_eq!(pe::machine(&x64), Some(crate::arch::PE_AMD64));
        let mut aa64 = x64.clone();
        let at = u32::from_le_bytes(aa64[0x3c..0x40].try_into().unwrap()) as usize;
        aa64[at + 4..at + 6].copy_from_slice(&crate::arch::PE_ARM64.to_le_bytes());
        assert_eq!(pe::machine(&aa64), Some(crate::arch::PE_ARM64));
        assert_eq!(pe::machine(b"MZ, and nothing after"), None);
        let parts = |arch: Option<Arch>| Parts {
            stub: "linuxx64.efi.stub".into(),
            kernel: "vmlinuz-arm64".into(),
            cmdline: String::new(),
            osrel: None,
            uname: String::new(),
            splash: None,
            devicetree: None,
            arch,
            sbat: Vec::new(),
            pcr: None,
            microcode: Vec::new(),
            profiles: Vec::new(),
        };
        let e = check_machines(&parts(None), &x64, &aa64).unwrap_err();
        assert!(
            e.to_string().contains(
                "the EFI stub `linuxx64.efi.stub` is for x86_64 and the kernel `vmlinuz-arm64` for aarch64"
            ),
            "{e}"
        );
        assert!(
            e.hint().unwrap().contains("linuxaa64.efi.stub"),
            "{:?}",
            e.hint()
        );
        check_machines(&parts(Some(Arch::AARCH64)), &aa64, &aa64).unwrap();
        let e = check_machines(&parts(Some(Arch::X86_64)), &aa64, &aa64).unwrap_err();
        assert!(
            e.to_string()
                .contains("is for aarch64 and the image's programs for x86_64"),
            "{e}"
        );
        // An x86 bzImage without an EFI stub counts as x86_64; anything else is refused.
        let mut bz = vec![0u8; 0x300];
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        check_machines(&parts(Some(Arch::X86_64)), &x64, &bz).unwrap();
        let e = check_machines(&parts(None), &x64, b"not a kernel").unwrap_err();
        assert!(
            e.to_string()
                .contains("neither an x86 bzImage nor an EFI program"),
            "{e}"
        );
    }

    /// A stub of systemd `version` (its `.sdmagic`) and an x86 kernel, as files.
    fn stub_and_kernel(version: u32) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let magic = format!("#### LoaderInfo: systemd-stub {version}.1-1 ####");
        let stub =
            pe::append_sections(&pe::tiny_pe(0x400), &[(".sdmagic", magic.as_bytes())]).unwrap();
        let mut kernel = vec![0u8; 0x400];
        kernel[0x202..0x206].copy_from_slice(b"HdrS");
        let (s, k) = (dir.path().join("stub.efi"), dir.path().join("vmlinuz"));
        std::fs::write(&s, stub).unwrap();
        std::fs::write(&k, kernel).unwrap();
        (dir, s, k)
    }

    fn parts_of(stub: PathBuf, kernel: PathBuf) -> Parts {
        Parts {
            stub,
            kernel,
            cmdline: "root=/dev/vda ro".into(),
            osrel: Some(b"NAME=Test\n".to_vec()),
            uname: "6.12.0".into(),
            splash: None,
            devicetree: None,
            arch: None,
            sbat: Vec::new(),
            pcr: None,
            microcode: b"070701ucode\0".to_vec(),
            profiles: vec![
                Profile {
                    id: "main".into(),
                    title: None,
                    cmdline: "root=/dev/vda ro".into(),
                },
                Profile {
                    id: "rescue".into(),
                    title: Some("Rescue \"shell\"".into()),
                    cmdline: "root=/dev/vda ro rd.shell".into(),
                },
            ],
        }
    }

    /// From systemd 257's stub: `.ucode` before `.initrd`, then each profile's
    /// `.profile`, with its `.cmdline` where it has its own; read back in order.
    #[test]
    fn profiles_and_microcode_follow_the_stubs_version() {
        let (_d, stub, kernel) = stub_and_kernel(257);
        let parts = parts_of(stub, kernel);
        let uki = assemble(&parts, b"070701image").unwrap();
        let names: Vec<String> = pe::sections(&uki[..pe::HEADERS_READ.min(uki.len())])
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        let tail: Vec<&str> = names.iter().map(String::as_str).skip(2).collect();
        assert_eq!(
            tail,
            [
                ".sbat", ".osrel", ".cmdline", ".uname", ".ucode", ".initrd", ".linux", ".profile",
                ".profile", ".cmdline"
            ],
            "{names:?}"
        );
        assert_eq!(
            pe::section_data(&uki, ".ucode"),
            Some(&b"070701ucode\0"[..])
        );
        let (_t, f) = file_of(&uki);
        let (info, initrd) = read(&f, uki.len() as u64, "uki.efi").unwrap();
        assert_eq!(initrd, b"070701image");
        assert_eq!(info.profiles, ["main", "rescue"]);
        assert_eq!(info.cmdline.as_deref(), Some("root=/dev/vda ro"));
        let rescue = String::from_utf8_lossy(&uki).into_owned();
        assert!(
            rescue.contains("ID=rescue\nTITLE=\"Rescue  shell \"\n"),
            "the .profile text"
        );
        assert!(rescue.contains("root=/dev/vda ro rd.shell\0"));
        // 256: microcode in `.ucode`, and no profiles.
        let (_d, stub, kernel) = stub_and_kernel(256);
        let e = assemble(&parts_of(stub.clone(), kernel.clone()), b"x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("(systemd 256) has no UKI profiles"), "{e}");
        let mut one = parts_of(stub, kernel);
        one.profiles.clear();
        let uki = assemble(&one, b"070701image").unwrap();
        assert!(pe::section_data(&uki, ".ucode").is_some());
        // 255: the microcode goes first in `.initrd`.
        let (_d, stub, kernel) = stub_and_kernel(255);
        let mut old = parts_of(stub, kernel);
        old.profiles.clear();
        let uki = assemble(&old, b"070701image").unwrap();
        assert_eq!(pe::section_data(&uki, ".ucode"), None);
        assert_eq!(
            pe::section_data(&uki, ".initrd"),
            Some(&b"070701ucode\x00070701image"[..])
        );
        // Two profiles of one ID.
        let (_d, stub, kernel) = stub_and_kernel(257);
        let mut twice = parts_of(stub, kernel);
        twice.profiles[1].id = "main".into();
        let e = assemble(&twice, b"x").unwrap_err().to_string();
        assert!(e.contains("two UKI profiles are named `main`"), "{e}");
    }

    #[test]
    fn a_profile_id_is_one_systemd_boot_can_list() {
        for ok in ["main", "rescue-1", "a.b_c", "2nd"] {
            check_profile_id(ok).unwrap();
        }
        for bad in ["", "Main", "with space", "a@b", "12", &"x".repeat(65)] {
            assert!(check_profile_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn os_name_prefers_pretty_name() {
        assert_eq!(
            os_name("NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")
                .as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(os_name("NAME=Arch\n").as_deref(), Some("Arch"));
        assert_eq!(os_name("ID=x\n"), None);
    }
}
