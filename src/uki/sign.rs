//! Secure Boot signing of a UKI with sbsign (Debian's sbsigntool): an
//! Authenticode signature over the PE image, as shim and the firmware check
//! it. sbsign is the tool distributions already sign kernels and UKIs with;
//! composer hands it the assembled image and reads the signed one back.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// What a signature adds to an image at most (the certificate chain and the
/// PKCS#7 envelope are a few KiB).
const SIGNATURE_ROOM: u64 = 1 << 20;

/// The most a PEM key file may hold.
const KEY_LIMIT: u64 = 1 << 20;

/// A signing key ready for sbsign: its file, and for a key encrypted with a
/// passphrase the key decrypted, in memory only (sbsign reads it from a pipe).
pub struct SigningKey {
    path: PathBuf,
    decrypted: Option<Vec<u8>>,
}

impl Drop for SigningKey {
    fn drop(&mut self) {
        if let Some(k) = &mut self.decrypted {
            k.iter_mut().for_each(|b| *b = 0);
        }
    }
}

/// Whether a PEM text holds an encrypted private key (PKCS#8's `ENCRYPTED
/// PRIVATE KEY`, or OpenSSL's traditional `Proc-Type: 4,ENCRYPTED`).
pub fn is_encrypted(pem: &[u8]) -> bool {
    let has = |needle: &[u8]| pem.windows(needle.len()).any(|w| w == needle);
    has(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") || has(b"Proc-Type: 4,ENCRYPTED")
}

/// Opens the signing key `key` before anything is built: a key without a
/// passphrase as it is; an encrypted one decrypted with openssl, the
/// passphrase read from `passphrase` (a file, never the command line), else
/// asked on the terminal by openssl. A wrong or missing passphrase is an
/// error that says so.
pub fn open_key(key: &Path, passphrase: Option<&Path>) -> Result<SigningKey> {
    let pem = crate::io::read_regular(key, KEY_LIMIT).map_err(|e| {
        Error::usage(format!("the signing key `{}`: {e}", key.display()))
            .with_hint("--sign-key and --sign-cert take PEM files")
    })?;
    if !is_encrypted(&pem) {
        return Ok(SigningKey {
            path: key.to_path_buf(),
            decrypted: None,
        });
    }
    use std::io::IsTerminal;
    let mut cmd = Command::new("openssl");
    cmd.args(["pkey", "-in"]).arg(key);
    match passphrase {
        Some(p) => {
            if !p.is_file() {
                return Err(Error::usage(format!(
                    "the passphrase file `{}` is not a readable file",
                    p.display()
                ))
                .with_hint("name the file that holds the key's passphrase (its first line)"));
            }
            cmd.arg("-passin").arg(format!("file:{}", p.display()));
            cmd.stdin(std::process::Stdio::null());
        }
        // openssl asks on the terminal ("Enter pass phrase for KEY:").
        None if std::io::stdin().is_terminal() => {}
        None => {
            return Err(Error::usage(format!(
                "the signing key `{}` is encrypted, and there is no passphrase to open it",
                key.display()
            ))
            .with_hint(
                "give --sign-passphrase-file FILE (or `sign_passphrase_file` in [uki]), or run \
                 composer on a terminal to be asked",
            ));
        }
    }
    let out = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| {
            Error::usage(format!(
                "cannot run openssl to open the encrypted key `{}`: {e}",
                key.display()
            ))
            .with_hint("install openssl")
        })?;
    if !out.status.success() || out.stdout.is_empty() {
        let err = String::from_utf8_lossy(&out.stderr);
        let wrong = err.contains("bad decrypt")
            || err.contains("wrong password")
            || err.contains("Could not read key")
            || err.contains("unable to load");
        return Err(if wrong {
            Error::usage(format!(
                "the passphrase does not open the signing key `{}`",
                key.display()
            ))
            .with_hint("check the passphrase (the first line of the passphrase file)")
        } else {
            Error::usage(format!(
                "openssl could not open the signing key `{}`: {}",
                key.display(),
                err.trim()
            ))
            .with_hint("--sign-key takes a PEM private key")
        });
    }
    Ok(SigningKey {
        path: key.to_path_buf(),
        decrypted: Some(out.stdout),
    })
}

/// `image` signed with `key` and `cert` (PEM files, as sbsign takes them; an
/// encrypted key decrypted by [`open_key`] goes to sbsign through a pipe).
pub fn sign(image: &[u8], key: &SigningKey, cert: &Path) -> Result<Vec<u8>> {
    for (what, p) in [("key", key.path.as_path()), ("certificate", cert)] {
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
    let mut cmd = Command::new("sbsign");
    // The decrypted key: written whole into a pipe (a key is a few KiB, less
    // than a pipe holds), whose read end sbsign opens as /dev/fd/N.
    let pipe = match &key.decrypted {
        None => {
            cmd.arg("--key").arg(&key.path);
            None
        }
        Some(pem) => {
            let (reader, mut writer) =
                std::io::pipe().map_err(|e| Error::io("a pipe for the signing key", e))?;
            writer
                .write_all(pem)
                .map_err(|e| Error::io("a pipe for the signing key", e))?;
            drop(writer);
            rustix::io::fcntl_setfd(&reader, rustix::io::FdFlags::empty())
                .map_err(|e| Error::io("a pipe for the signing key", e.into()))?;
            use std::os::fd::AsRawFd;
            cmd.arg("--key")
                .arg(format!("/dev/fd/{}", reader.as_raw_fd()));
            Some(reader)
        }
    };
    let out = cmd
        .arg("--cert")
        .arg(cert)
        .arg("--output")
        .arg(signed.path())
        .arg(unsigned.path())
        .output();
    drop(pipe);
    let out = out.map_err(|e| {
        Error::usage(format!("cannot run sbsign to sign the UKI: {e}"))
            .with_hint("install sbsign (Debian: sbsigntool)")
    })?;
    if !out.status.success() {
        return Err(Error::usage(format!(
            "sbsign could not sign the UKI with `{}` and `{}`: {}",
            key.path.display(),
            cert.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .with_hint("check that the key and the certificate are a PEM pair"));
    }
    crate::io::read_regular(signed.path(), image.len() as u64 + SIGNATURE_ROOM)
        .map_err(|e| Error::usage(format!("the UKI sbsign signed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encrypted_keys_are_told_apart() {
        assert!(is_encrypted(
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIF\n"
        ));
        assert!(is_encrypted(
            b"-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00\n"
        ));
        assert!(!is_encrypted(b"-----BEGIN PRIVATE KEY-----\nMIIE\n"));
        assert!(!is_encrypted(b""));
    }

    #[test]
    fn an_encrypted_key_without_a_passphrase_off_a_terminal_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k.pem");
        std::fs::write(
            &key,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        let missing = dir.path().join("none");
        let e = open_key(&key, Some(&missing)).err().unwrap();
        assert!(e.to_string().contains("is not a readable file"), "{e}");
        let e = open_key(&dir.path().join("nokey"), None).err().unwrap();
        assert!(e.to_string().contains("the signing key"), "{e}");
    }
}
