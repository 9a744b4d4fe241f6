//! `composer build --uki`: the image built into a temporary file, then put
//! with the kernel and the command line into a unified kernel image that
//! replaces the output atomically (signed first when asked).

use std::io::Write;
use std::path::{Path, PathBuf};

use composer::error::{Error, Result};
use composer::resolve::root::Root;
use composer::spec::{BootTarget, ImageSpec};
use composer::uki::sign::SigningKey;
use composer::uki::Parts;
use composer::write::{BeforeCommit, BuildReport, Output};

use super::ui;

#[derive(clap::Args, Debug, Default)]
pub struct UkiArgs {
    /// With --uki: systemd's EFI stub (default: the root's
    /// /usr/lib/systemd/boot/efi/linuxx64.efi.stub, from systemd-boot-efi).
    #[arg(long, value_name = "FILE", requires = "uki")]
    pub stub: Option<PathBuf>,
    /// With --uki: the kernel image (default: the root's /boot/vmlinuz-KVER,
    /// else /usr/lib/modules/KVER/vmlinuz).
    #[arg(long, value_name = "FILE", requires = "uki")]
    pub kernel: Option<PathBuf>,
    /// With --uki: a boot splash (BMP) for the stub to show.
    #[arg(long, value_name = "FILE", requires = "uki")]
    pub splash: Option<PathBuf>,
    /// With --uki: a device tree blob for the stub to install.
    #[arg(long, value_name = "FILE", requires = "uki")]
    pub devicetree: Option<PathBuf>,
    /// With --uki: sign the UKI for Secure Boot with this key (PEM, or a key
    /// on a PKCS#11 token named by a `pkcs11:` URI; needs sbsign, and
    /// --sign-cert). The signature is checked with sbverify before the UKI
    /// is written.
    #[arg(long, value_name = "KEY", requires_all = ["uki", "sign_cert"])]
    pub sign_key: Option<PathBuf>,
    /// With --uki: the OpenSSL engine that holds --sign-key (`pkcs11`, the
    /// default for a `pkcs11:` URI).
    #[arg(long, value_name = "ENGINE", requires_all = ["uki", "sign_key"])]
    pub sign_engine: Option<String>,
    /// With --uki: the certificate (PEM) of --sign-key.
    #[arg(long, value_name = "CERT", requires_all = ["uki", "sign_key"])]
    pub sign_cert: Option<PathBuf>,
    /// With --uki: the file whose first line is the passphrase of an
    /// encrypted --sign-key (without it, openssl asks on the terminal).
    #[arg(long, value_name = "FILE", requires = "uki")]
    pub sign_passphrase_file: Option<PathBuf>,
    /// With --uki: sign PCR 11 policies for the UKI with this RSA key (PEM):
    /// `.pcrsig` and `.pcrpkey`, which let a LUKS volume enrolled with
    /// `systemd-cryptenroll --tpm2-public-key=` open with no prompt.
    #[arg(long, value_name = "KEY", requires = "uki")]
    pub pcr_private_key: Option<PathBuf>,
    /// With --uki: the public key (PEM) of --pcr-private-key, put in
    /// `.pcrpkey` (default: derived from it).
    #[arg(long, value_name = "KEY", requires = "pcr_private_key")]
    pub pcr_public_key: Option<PathBuf>,
    /// With --pcr-private-key: the boot phases to sign policies for
    /// (`enter-initrd:leave-initrd`...; several in one argument, separated
    /// by spaces, or the option repeated; default ukify's four).
    #[arg(long, value_name = "PHASES", requires = "pcr_private_key")]
    pub phases: Vec<String>,
    /// With --uki: an SBAT line for the UKI's `.sbat`, after the stub's, the
    /// kernel's, composer's and the manifest's (`@FILE`: the lines of a
    /// file); repeatable.
    #[arg(long = "sbat", value_name = "LINE", requires = "uki")]
    pub sbat: Vec<String>,
    /// With --uki: an initrd to put before the image in the UKI's `.initrd`
    /// (CPU microcode, as kernel-install passes it), in the order given;
    /// repeatable.
    #[arg(long = "initrd", value_name = "FILE", requires = "uki")]
    pub initrds: Vec<PathBuf>,
    /// With --uki: a CPU microcode archive (an early cpio) for the UKI's
    /// `.ucode` (systemd 256's stub and later; with an older stub, first in
    /// `.initrd`), after the manifest's; repeatable.
    #[arg(long = "microcode", value_name = "FILE", requires = "uki")]
    pub microcode: Vec<PathBuf>,
}

/// The largest initrd given with --initrd.
const GIVEN_INITRD_LIMIT: u64 = 512 << 20;

/// The initrds given with --initrd (or the microcode archives), each padded
/// to four bytes (where the kernel looks for the next archive's header):
/// what goes before the image in the UKI's `.initrd` (or in `.ucode`), as
/// ukify concatenates them. Read before the image is built, so that a
/// missing one costs no build.
fn given_initrds<'a>(
    given: impl IntoIterator<Item = &'a PathBuf>,
    what: &str,
    hint: &str,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for g in given {
        let bytes = composer::io::read_regular(g, GIVEN_INITRD_LIMIT).map_err(|e| {
            Error::usage(format!("the {what} `{}`: {e}", g.display())).with_hint(hint.to_string())
        })?;
        out.extend_from_slice(&bytes);
        out.resize(out.len().next_multiple_of(4), 0);
    }
    Ok(out)
}

/// The root's kernel image for `kver`, links followed inside the root.
fn default_kernel(target: &BootTarget) -> Result<PathBuf> {
    let root = Root::new(&target.root);
    let kver = &target.kver;
    let candidates = [
        format!("/boot/vmlinuz-{kver}"),
        format!("/usr/lib/modules/{kver}/vmlinuz"),
    ];
    candidates
        .iter()
        .filter_map(|c| root.resolve(Path::new(c), true).ok())
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::usage(format!(
                "no kernel image for {kver} in `{}`: neither {} nor {} is there",
                target.root.display(),
                candidates[0],
                candidates[1]
            ))
            .with_hint("name the kernel with --kernel FILE")
        })
}

/// What goes into the UKI besides the image: from the options, else from the
/// root.
fn parts(a: &UkiArgs, target: &BootTarget, cmdline: Option<&str>) -> Result<Parts> {
    if target.kver.is_empty() {
        return Err(Error::usage("a UKI needs the kernel's version").with_hint("give --kver KVER"));
    }
    let m = &target.uki;
    let kernel = match a.kernel.as_ref().or(m.kernel.as_ref()) {
        Some(k) => k.clone(),
        None => default_kernel(target)?,
    };
    let cmdline = match cmdline.or(m.cmdline.as_deref()) {
        Some(c) => c.split_whitespace().collect::<Vec<_>>().join(" "),
        None => composer::cmdline::of_root(&target.root).ok_or_else(|| {
            Error::usage(format!(
                "no command line for the UKI: `{}` has no /etc/kernel/cmdline",
                target.root.join("etc/kernel/cmdline").display()
            ))
            .with_hint("write it there, or give --cmdline \"root=... ro\"")
        })?,
    };
    if !cmdline
        .split_whitespace()
        .any(|w| w.starts_with("root=") || w.starts_with("roothash="))
    {
        ui::note(&format!(
            "the UKI's command line `{cmdline}` names no root=: the root is found by its \
             partition type on the disk the firmware booted from (gpt-auto)"
        ));
    }
    let profiles = m
        .profiles
        .iter()
        .map(|p| {
            let mut c = p.cmdline.clone().unwrap_or_else(|| cmdline.clone());
            if let Some(more) = &p.append {
                c = format!("{c} {more}");
            }
            composer::uki::Profile {
                id: p.id.clone(),
                title: p.title.clone(),
                cmdline: c.split_whitespace().collect::<Vec<_>>().join(" "),
            }
        })
        .collect();
    Ok(Parts {
        stub: a
            .stub
            .clone()
            .or_else(|| m.stub.clone())
            .unwrap_or_else(|| composer::uki::default_stub(&target.root, target.arch)),
        kernel,
        cmdline,
        osrel: composer::uki::root_osrel(&target.root),
        uname: target.kver.clone(),
        splash: a.splash.clone().or_else(|| m.splash.clone()),
        devicetree: a.devicetree.clone().or_else(|| m.devicetree.clone()),
        arch: Some(target.arch),
        sbat: sbat_lines(&m.sbat, &a.sbat)?,
        pcr: pcr_signing(a, m)?,
        microcode: given_initrds(
            m.microcode.iter().chain(&a.microcode),
            "microcode archive",
            "[uki] microcode and --microcode take early cpio files (CPU microcode)",
        )?,
        profiles,
    })
}

/// The PCR key and phases: the options', else the manifest's; the key
/// opened (its public key derived or checked) before anything is built.
fn pcr_signing(
    a: &UkiArgs,
    m: &composer::spec::UkiConfig,
) -> Result<Option<composer::uki::PcrSigning>> {
    let Some(private) = a.pcr_private_key.as_ref().or(m.pcr_private_key.as_ref()) else {
        if m.pcr_public_key.is_some() || !m.phases.is_empty() {
            return Err(Error::usage(
                "[uki] names a PCR public key or phases, and no pcr_private_key to sign with",
            )
            .with_hint("set pcr_private_key in [uki], or give --pcr-private-key"));
        }
        return Ok(None);
    };
    let public = a.pcr_public_key.as_ref().or(m.pcr_public_key.as_ref());
    let given: Vec<String> = a
        .phases
        .iter()
        .flat_map(|p| p.split_whitespace())
        .map(str::to_string)
        .collect();
    let phases = if !given.is_empty() {
        given
    } else if !m.phases.is_empty() {
        m.phases.clone()
    } else {
        composer::uki::pcr::DEFAULT_PHASES
            .iter()
            .map(|p| p.to_string())
            .collect()
    };
    composer::uki::pcr::check_phases(&phases)?;
    Ok(Some(composer::uki::PcrSigning {
        key: composer::uki::pcr::PcrKey::open(private, public.map(PathBuf::as_path))?,
        phases,
    }))
}

/// The SBAT lines to add: the manifest's, then the options' (`@FILE` read).
fn sbat_lines(manifest: &[String], options: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = manifest.to_vec();
    for o in options {
        match o.strip_prefix('@') {
            Some(file) => {
                let bytes = composer::io::read_regular(Path::new(file), 64 << 10).map_err(|e| {
                    Error::usage(format!("--sbat @{file}: {e}"))
                        .with_hint("@FILE names a file of SBAT lines")
                })?;
                out.extend(
                    String::from_utf8_lossy(&bytes)
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(str::to_string),
                );
            }
            None => out.push(o.clone()),
        }
    }
    Ok(out)
}

/// The key and certificate to sign with: the options', else the manifest's;
/// the key opened (decrypted, for an encrypted one) before anything is built.
fn signing(a: &UkiArgs, target: &BootTarget) -> Result<Option<(SigningKey, PathBuf)>> {
    let m = &target.uki;
    let key = a.sign_key.clone().or_else(|| m.sign_key.clone());
    let cert = a.sign_cert.clone().or_else(|| m.sign_cert.clone());
    let passphrase = a
        .sign_passphrase_file
        .clone()
        .or_else(|| m.sign_passphrase_file.clone());
    let engine = a.sign_engine.clone().or_else(|| m.sign_engine.clone());
    match (key, cert) {
        (Some(k), Some(c)) => Ok(Some((
            composer::uki::sign::open_key(&k, passphrase.as_deref(), engine.as_deref())?,
            c,
        ))),
        (None, None) => Ok(None),
        _ => Err(Error::usage(
            "a UKI is signed with a key and its certificate, and only one is given",
        )
        .with_hint(
            "set both `sign_key` and `sign_cert` in [uki], or both --sign-key and --sign-cert",
        )),
    }
}

/// Builds `spec`'s image (checked by `before` as an initrd would be), makes the
/// UKI of it and writes that to `out`.
pub fn build(
    spec: &ImageSpec,
    out: &Path,
    a: &UkiArgs,
    cmdline: Option<&str>,
    sync: bool,
    before: Option<BeforeCommit>,
) -> Result<BuildReport> {
    let target = spec.target.as_ref().ok_or_else(|| {
        Error::usage("--uki needs a manifest build")
            .with_hint("a list names no kernel to put in the UKI")
    })?;
    let parts = parts(a, target, cmdline)?;
    let sign = signing(a, target)?;
    let given = given_initrds(
        &a.initrds,
        "initrd",
        "--initrd takes an initrd file (a cpio archive, CPU microcode)",
    )?;
    // The image, in an anonymous file; the output is not touched yet.
    let file = tempfile::tempfile().map_err(|e| Error::io("a temporary file for the image", e))?;
    let kept = file
        .try_clone()
        .map_err(|e| Error::io("a temporary file for the image", e))?;
    let name = format!("{} (.initrd)", out.display());
    let mut report =
        composer::pipeline::build_checked(spec, Output::stream(file, &name), false, before)?;
    let len = kept.metadata().map_err(|e| Error::io(&name, e))?.len();
    let mut initrd = given;
    let at = initrd.len();
    initrd.resize(at + len as usize, 0);
    let got =
        composer::io::read_full_at(&kept, &mut initrd[at..], 0).map_err(|e| Error::io(&name, e))?;
    initrd.truncate(at + got);
    let mut uki = composer::uki::assemble(&parts, &initrd)?;
    if !parts.microcode.is_empty() && composer::uki::pe::section_data(&uki, ".ucode").is_none() {
        ui::note(&format!(
            "the EFI stub `{}` reads no `.ucode` (systemd {}'s and later do): the microcode \
             goes first in `.initrd`",
            parts.stub.display(),
            composer::uki::UCODE_SINCE
        ));
    }
    if let Some((key, cert)) = &sign {
        uki = composer::uki::sign::sign(&uki, key, cert)?;
    }
    let mut output = ui::archive_output(out)?;
    if spec.private {
        output = output.private();
    }
    if let Some((free, dir)) = output.free_space() {
        if free < uki.len() as u64 {
            return Err(Error::usage(format!(
                "{}: the UKI takes {} bytes, and {} has only {free} bytes free; the old file \
                 is kept",
                out.display(),
                uki.len(),
                dir.display()
            ))
            .with_hint("make room there, or build a smaller image (`composer plan` shows the largest files)"));
        }
    }
    output
        .file()
        .write_all(&uki)
        .map_err(|e| Error::io(out, e))?;
    output.commit(sync)?;
    if !ui::quiet() {
        eprintln!(
            "composer: {} is a unified kernel image{}: kernel {} bytes, initrd {} bytes, \
             command line `{}`",
            out.display(),
            if sign.is_some() { ", signed" } else { "" },
            std::fs::metadata(&parts.kernel)
                .map(|m| m.len())
                .unwrap_or(0),
            initrd.len(),
            parts.cmdline
        );
        for p in &parts.profiles {
            eprintln!("composer: profile `{}`: command line `{}`", p.id, p.cmdline);
        }
    }
    report.size = uki.len() as u64;
    Ok(report)
}
