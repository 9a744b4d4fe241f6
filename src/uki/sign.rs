//! Secure Boot signing of a UKI with sbsign (Debian's sbsigntool): an
//! Authenticode signature over the PE image, as shim and the firmware check
//! it. sbsign is the tool distributions already sign kernels and UKIs with;
//! composer hands it the assembled image and reads the signed one back.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use crate::error::{Error, Result};

/// What a signature adds to an image at most (the certificate chain and the
/// PKCS#7 envelope are a few KiB).
const SIGNATURE_ROOM: u64 = 1 << 20;

/// `image` signed with `key` and `cert` (PEM files, as sbsign takes them).
pub fn sign(image: &[u8], key: &Path, cert: &Path) -> Result<Vec<u8>> {
    for (what, p) in [("key", key), ("certificate", cert)] {
        if !p.is_file() {
            return Err(Error::usage(format!(
                "the signing {what} `{}` is not a readable file",
                p.display()
            ))
            .with_hint("--sign-key and --sign-cert take PEM files"));
        }
    }
    let temp = |what: &str| {
        tempfile::Builder::new()
            .prefix(".composer-uki-")
            .tempfile()
            .map_err(|e| Error::io(format!("a temporary file for the {what} UKI"), e))
    };
    let mut unsigned = temp("unsigned")?;
    unsigned
        .write_all(image)
        .and_then(|()| unsigned.flush())
        .map_err(|e| Error::io(unsigned.path(), e))?;
    let signed = temp("signed")?;
    let out = Command::new("sbsign")
        .arg("--key")
        .arg(key)
        .arg("--cert")
        .arg(cert)
        .arg("--output")
        .arg(signed.path())
        .arg(unsigned.path())
        .output()
        .map_err(|e| {
            Error::usage(format!("cannot run sbsign to sign the UKI: {e}"))
                .with_hint("install sbsign (Debian: sbsigntool)")
        })?;
    if !out.status.success() {
        return Err(Error::usage(format!(
            "sbsign could not sign the UKI with `{}` and `{}`: {}",
            key.display(),
            cert.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .with_hint("check that the key and the certificate are a PEM pair"));
    }
    crate::io::read_regular(signed.path(), image.len() as u64 + SIGNATURE_ROOM)
        .map_err(|e| Error::usage(format!("the UKI sbsign signed: {e}")))
}
