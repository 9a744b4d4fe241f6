//! Secure Boot signing of a UKI with sbsign (Debian's sbsigntool): an
//! Authenticode signature over the PE image, as shim and the firmware check
//! it. sbsign is the tool distributions already sign kernels and UKIs with;
//! composer hands it the assembled image and reads the signed one back,
//! then has sbverify check the signature against the certificate before the
//! UKI is written anywhere. The key is a PEM file (encrypted or not), or a
//! key on a PKCS#11 token named by a `pkcs11:` URI (RFC 7512), which sbsign
//! reaches through OpenSSL's pkcs11 engine (Debian: libengine-pkcs11-openssl).

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
/// passphrase the key decrypted, in memory only (sbsign reads it from a pipe);
/// or a key an OpenSSL engine holds (a `pkcs11:` URI), named to the engine.
pub struct SigningKey {
    path: PathBuf,
    decrypted: Option<Vec<u8>>,
    engine: Option<String>,
}

/// Whether `key` names a key on a PKCS#11 token (an RFC 7512 URI).
pub fn is_token_uri(key: &Path) -> bool {
    key.as_os_str().as_encoded_bytes().starts_with(b"pkcs11:")
}

/// `key` with its PIN left out (`pin-value=...` of a `pkcs11:` URI), for
/// messages.
fn shown(key: &Path) -> String {
    let k = key.display().to_string();
    if !is_token_uri(key) {
        return k;
    }
    k.split([';', '?'])
        .filter(|a| !a.starts_with("pin-value="))
        .collect::<Vec<_>>()
        .join(";")
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
/// error that says so. With an `engine` (`pkcs11` for a `pkcs11:` URI, where
/// it is the default), `key` is the engine's name of the key, its PIN in the
/// URI (`pin-value=`, `pin-source=`) or asked by the engine.
pub fn open_key(key: &Path, passphrase: Option<&Path>, engine: Option<&str>) -> Result<SigningKey> {
    let engine = engine
        .map(str::to_string)
        .or_else(|| is_token_uri(key).then(|| "pkcs11".to_string()));
    if let Some(engine) = engine {
        if passphrase.is_some() {
            return Err(Error::usage(format!(
                "a passphrase file opens an encrypted PEM key, and `{}` is a key of the {engine} \
                 engine",
                shown(key)
            ))
            .with_hint("give a token's PIN in its URI (pin-source=FILE or pin-value=PIN)"));
        }
        return Ok(SigningKey {
            path: key.to_path_buf(),
            decrypted: None,
            engine: Some(engine),
        });
    }
    let pem = crate::io::read_regular(key, KEY_LIMIT).map_err(|e| {
        Error::usage(format!("the signing key `{}`: {e}", key.display()))
            .with_hint("--sign-key and --sign-cert take PEM files")
    })?;
    if !is_encrypted(&pem) {
        return Ok(SigningKey {
            path: key.to_path_buf(),
            decrypted: None,
            engine: None,
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
        engine: None,
    })
}

/// `image` signed with `key` and `cert` (PEM files, as sbsign takes them; an
/// encrypted key decrypted by [`open_key`] goes to sbsign through a pipe; a
/// key of an engine is named to it), and the signature checked by sbverify
/// against `cert`: a signed image that does not verify is an error.
pub fn sign(image: &[u8], key: &SigningKey, cert: &Path) -> Result<Vec<u8>> {
    let files: &[(&str, &Path)] = match key.engine {
        None => &[("key", key.path.as_path()), ("certificate", cert)],
        Some(_) => &[("certificate", cert)],
    };
    for &(what, p) in files {
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
    if let Some(engine) = &key.engine {
        cmd.arg("--engine").arg(engine);
    }
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
            shown(&key.path),
            cert.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .with_hint(match &key.engine {
            None => "check that the key and the certificate are a PEM pair".to_string(),
            Some(e) => format!(
                "check the key's URI and PIN, that the token holds the certificate's key, and \
                 that OpenSSL has the {e} engine (Debian: libengine-pkcs11-openssl)"
            ),
        }));
    }
    verify(signed.path(), cert)?;
    crate::io::read_regular(signed.path(), image.len() as u64 + SIGNATURE_ROOM)
        .map_err(|e| Error::usage(format!("the UKI sbsign signed: {e}")))
}

/// sbverify's word on the signed image at `signed`: its signature is checked
/// against `cert`.
fn verify(signed: &Path, cert: &Path) -> Result<()> {
    let out = Command::new("sbverify")
        .arg("--cert")
        .arg(cert)
        .arg(signed)
        .output()
        .map_err(|e| {
            Error::usage(format!("cannot run sbverify to check the signed UKI: {e}"))
                .with_hint("install sbverify (Debian: sbsigntool)")
        })?;
    if out.status.success() {
        return Ok(());
    }
    // (sbverify's warnings about gaps between sections are the stub's layout.)
    let said: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .chain(String::from_utf8_lossy(&out.stdout).lines())
        .filter(|l| !l.starts_with("warning: data remaining"))
        .map(str::to_string)
        .collect();
    Err(Error::usage(format!(
        "the signed UKI does not verify against `{}` (sbverify: {}); nothing was written",
        cert.display(),
        said.join("; ")
    ))
    .with_hint("sign with the key of this certificate"))
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
        let e = open_key(&key, Some(&missing), None).err().unwrap();
        assert!(e.to_string().contains("is not a readable file"), "{e}");
        let e = open_key(&dir.path().join("nokey"), None, None)
            .err()
            .unwrap();
        assert!(e.to_string().contains("the signing key"), "{e}");
    }

    #[test]
    fn a_token_uri_is_a_key_of_the_pkcs11_engine_and_its_pin_is_not_shown() {
        let uri = Path::new("pkcs11:token=sb;object=uki;type=private;pin-value=1234");
        assert!(is_token_uri(uri) && !is_token_uri(Path::new("/k/pkcs11:x")));
        let k = open_key(uri, None, None).unwrap();
        assert_eq!(k.engine.as_deref(), Some("pkcs11"));
        assert_eq!(shown(uri), "pkcs11:token=sb;object=uki;type=private");
        let e = open_key(uri, Some(Path::new("/p")), None).err().unwrap();
        assert!(e.to_string().contains("a key of the pkcs11 engine"), "{e}");
        assert!(!e.to_string().contains("1234"), "{e}");
        // An engine named for another key name.
        let k = open_key(Path::new("0:01"), None, Some("tpm2tss")).unwrap();
        assert_eq!(k.engine.as_deref(), Some("tpm2tss"));
    }
}
