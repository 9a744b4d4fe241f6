//! Signed PCR 11 policies for a UKI, as `systemd-measure sign` makes them
//! (and ukify's `--pcr-private-key`), computed here without a TPM.
//!
//! systemd's stub measures the UKI's sections into PCR 11 (SHA-256 bank):
//! for each section it knows, in a fixed order (`.linux`, `.osrel`,
//! `.cmdline`, `.initrd`, `.splash`, `.dtb`, then for stubs of systemd 254
//! and later `.uname` and `.sbat`, then `.pcrpkey`; never `.pcrsig`), it
//! extends the PCR with the SHA-256 of the section's name (with its NUL)
//! and then of its bytes as they are mapped (its virtual size). In the
//! initrd and after it, systemd-pcrphase extends it with each boot phase's
//! word (`enter-initrd`, `leave-initrd`, `sysinit`, `ready`). A policy is
//! TPM2's PolicyPCR digest over PCR 11 holding the value of one phase;
//! `.pcrsig` holds, for each phase, that digest signed with the PCR key
//! (RSA, PKCS#1 v1.5 over its SHA-256), in the JSON systemd-cryptsetup
//! reads from `/.extra/tpm2-pcr-signature.json`, where the stub puts it.
//! A volume enrolled with `systemd-cryptenroll --tpm2-public-key=` opens
//! when the TPM's PCR 11 matches a policy signed with that key: an updated
//! UKI signed with the same key keeps opening it, any other does not.
//!
//! The signature and the public key's forms come from openssl (the key is
//! a PEM file, read by openssl only).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::uki::versions;

/// The phases a policy is signed for when none are given: ukify's and
/// systemd-measure's (the initrd, the switch to the root, the root's early
/// boot and its boot done).
pub const DEFAULT_PHASES: [&str; 4] = [
    "enter-initrd",
    "enter-initrd:leave-initrd",
    "enter-initrd:leave-initrd:sysinit",
    "enter-initrd:leave-initrd:sysinit:ready",
];

/// TPM2_CC_PolicyPCR.
const TPM2_CC_POLICY_PCR: u32 = 0x0000_017f;
/// TPM2_ALG_SHA256.
const TPM2_ALG_SHA256: u16 = 0x000b;
/// The PCR the stub measures the UKI into.
const PCR: u32 = 11;
/// The most a PEM public key, or openssl's output, may hold.
const KEY_LIMIT: usize = 1 << 20;

/// The sections a stub of systemd `version` (None: unknown, taken as the
/// oldest that measures) measures into PCR 11, in the order it does.
pub fn measured_sections(version: Option<u32>) -> Vec<&'static str> {
    let since = |s: u32| version.is_some_and(|v| v >= s);
    let mut v = vec![".linux", ".osrel", ".cmdline", ".initrd"];
    if since(versions::UCODE_SINCE) {
        v.push(".ucode");
    }
    v.extend([".splash", ".dtb"]);
    if since(versions::UNAME_SBAT_MEASURED_SINCE) {
        v.extend([".uname", ".sbat"]);
    }
    v.push(".pcrpkey");
    v
}

/// The systemd version of a stub, from its `.sdmagic` section
/// (`#### LoaderInfo: systemd-stub 252.39-1~deb12u2 ####`).
pub fn stub_version(sdmagic: &[u8]) -> Option<u32> {
    let text = String::from_utf8_lossy(sdmagic);
    let rest = text.split("systemd-stub ").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn extend(pcr: &mut [u8; 32], data: &[u8]) {
    let mut h = Sha256::new();
    h.update(*pcr);
    h.update(Sha256::digest(data));
    *pcr = h.finalize().into();
}

/// PCR 11 after the stub measured `sections` (name and mapped bytes, in the
/// order it measures them; the caller leaves out what it does not measure)
/// and systemd-pcrphase measured the words of `phase` (`enter-initrd:...`).
pub fn pcr11(sections: &[(&str, &[u8])], phase: &str) -> [u8; 32] {
    let mut pcr = [0u8; 32];
    for (name, data) in sections {
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        extend(&mut pcr, &n);
        extend(&mut pcr, data);
    }
    for word in phase.split(':').filter(|w| !w.is_empty()) {
        extend(&mut pcr, word.as_bytes());
    }
    pcr
}

/// The PolicyPCR digest (SHA-256, from an empty policy) of PCR 11 holding
/// `value`.
pub fn policy(value: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8; 32]);
    h.update(TPM2_CC_POLICY_PCR.to_be_bytes());
    // TPML_PCR_SELECTION: one selection, SHA-256, three bytes of bitmap.
    h.update(1u32.to_be_bytes());
    h.update(TPM2_ALG_SHA256.to_be_bytes());
    let mut bitmap = [0u8; 3];
    bitmap[(PCR / 8) as usize] |= 1 << (PCR % 8);
    h.update([3u8]);
    h.update(bitmap);
    h.update(Sha256::digest(value));
    h.finalize().into()
}

/// A PCR signing key pair: the private key's file (read by openssl), the
/// public key in PEM (what `.pcrpkey` holds), and the fingerprint
/// systemd-cryptsetup matches: the SHA-256 of the public key in PKCS#1 DER.
#[derive(Clone, Debug)]
pub struct PcrKey {
    private: PathBuf,
    pub public_pem: Vec<u8>,
    fingerprint: [u8; 32],
}

/// Runs openssl with `args` and `input` on its standard input; its output,
/// or an error saying what it said.
fn openssl(args: &[&std::ffi::OsStr], input: &[u8], what: &str) -> Result<Vec<u8>> {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            Error::usage(format!("cannot run openssl for {what}: {e}")).with_hint("install openssl")
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // (A refusal shows in openssl's status; a broken pipe here adds nothing.)
        let _ = stdin.write_all(input);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Error::io(format!("openssl for {what}"), e))?;
    if !out.status.success() || out.stdout.is_empty() || out.stdout.len() > KEY_LIMIT {
        return Err(Error::usage(format!(
            "openssl could not make {what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

impl PcrKey {
    /// The pair of `private` (an RSA key in PEM) and `public` (its public
    /// key in PEM; by default derived from it). A public key that is not
    /// the private key's is an error: the UKI's policies would not verify.
    pub fn open(private: &Path, public: Option<&Path>) -> Result<PcrKey> {
        let fail = |e: Error| {
            Error::usage(format!(
                "the PCR signing key `{}`: {}",
                private.display(),
                e
            ))
            .with_hint("--pcr-private-key takes an RSA private key in PEM (openssl genrsa)")
        };
        if !private.is_file() {
            return Err(Error::usage(format!(
                "the PCR signing key `{}` is not a readable file",
                private.display()
            ))
            .with_hint("--pcr-private-key takes an RSA private key in PEM (openssl genrsa)"));
        }
        let derived = openssl(
            &[
                "pkey".as_ref(),
                "-in".as_ref(),
                private.as_os_str(),
                "-pubout".as_ref(),
            ],
            b"",
            "the PCR key's public key",
        )
        .map_err(fail)?;
        let public_pem = match public {
            None => derived.clone(),
            Some(p) => {
                let pem = crate::io::read_regular(p, KEY_LIMIT as u64).map_err(|e| {
                    Error::usage(format!("the PCR public key `{}`: {e}", p.display()))
                        .with_hint("--pcr-public-key takes the PEM public key of --pcr-private-key")
                })?;
                let given = openssl(
                    &["pkey".as_ref(), "-pubin".as_ref(), "-pubout".as_ref()],
                    &pem,
                    "the PCR public key",
                )?;
                if given != derived {
                    return Err(Error::usage(format!(
                        "the PCR public key `{}` is not the public key of `{}`",
                        p.display(),
                        private.display()
                    ))
                    .with_hint("give the pair's public key, or leave --pcr-public-key out"));
                }
                pem
            }
        };
        let pkcs1 = openssl(
            &[
                "rsa".as_ref(),
                "-pubin".as_ref(),
                "-RSAPublicKey_out".as_ref(),
                "-outform".as_ref(),
                "DER".as_ref(),
            ],
            &derived,
            "the PCR key's fingerprint (an RSA key)",
        )
        .map_err(fail)?;
        Ok(PcrKey {
            private: private.to_path_buf(),
            public_pem,
            fingerprint: Sha256::digest(&pkcs1).into(),
        })
    }

    /// `.pcrsig`: for each of `phases`, PCR 11's policy after `sections`
    /// and the phase, signed; the JSON systemd-measure writes.
    pub fn sign<D: AsRef<[u8]>>(
        &self,
        sections: &[(&str, D)],
        phases: &[String],
    ) -> Result<String> {
        let sections: Vec<(&str, &[u8])> = sections.iter().map(|(n, d)| (*n, d.as_ref())).collect();
        let mut entries = Vec::new();
        for phase in phases {
            let pol = policy(&pcr11(&sections, phase));
            let sig = openssl(
                &[
                    "dgst".as_ref(),
                    "-sha256".as_ref(),
                    "-sign".as_ref(),
                    self.private.as_os_str(),
                ],
                &pol,
                "a PCR policy's signature",
            )?;
            entries.push(serde_json::json!({
                "pcrs": [PCR],
                "pkfp": hex(&self.fingerprint),
                "pol": hex(&pol),
                "sig": base64(&sig),
            }));
        }
        let mut text = serde_json::json!({ "sha256": entries }).to_string();
        text.push('\n');
        Ok(text)
    }
}

/// Checks the phases given (`enter-initrd:leave-initrd`...): words of
/// letters, digits, `-` and `_`, joined by colons.
pub fn check_phases(phases: &[String]) -> Result<()> {
    for p in phases {
        let ok = !p.is_empty()
            && p.split(':').all(|w| {
                !w.is_empty()
                    && w.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        if !ok {
            return Err(Error::usage(format!("`{p}` is not a boot phase"))
                .with_hint("phases are words joined by colons: enter-initrd:leave-initrd"));
        }
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Standard base64 with padding.
fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_hex_are_the_standard_ones() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe]), "//4=");
        assert_eq!(hex(&[0, 0xab]), "00ab");
    }

    /// The values `systemd-measure calculate` (systemd 252) gave for these
    /// sections and phases, and the policy its `sign` gave for the first.
    #[test]
    fn pcr_values_and_the_policy_are_systemds() {
        let sections: [(&str, &[u8]); 3] = [
            (".linux", b"kernel"),
            (".cmdline", b"root=/dev/vda\0"),
            (".initrd", b"initrd"),
        ];
        assert_eq!(
            hex(&pcr11(&sections, "enter-initrd")),
            "7e6d4b239de850bc312bbdcc0a3cb3408393e0eecd444bc696ff947e151a0c54"
        );
        assert_eq!(
            hex(&pcr11(&sections, "enter-initrd:leave-initrd")),
            "7eca7666bf0936d9f8cb9b3980f75bf17d3d735da28768277349ad6446174037"
        );
        assert_eq!(
            hex(&policy(&pcr11(&sections, "enter-initrd"))),
            "700ded4fccc4207e15b3bab844f0544509875a305de50a418407c02270508e08"
        );
        let empty = pcr11(&[], "");
        assert_eq!(empty, [0u8; 32]);
        // extend(0, x) = sha256(0^32 || sha256(x)), by hand for one word.
        let mut want = [0u8; 32];
        let mut h = Sha256::new();
        h.update([0u8; 32]);
        h.update(Sha256::digest(b"enter-initrd"));
        want.copy_from_slice(&h.finalize());
        assert_eq!(pcr11(&[], "enter-initrd"), want);
        // Phases extend in order, words split at colons.
        let a = pcr11(&sections, "enter-initrd:leave-initrd");
        let mut b = pcr11(&sections, "enter-initrd");
        extend(&mut b, b"leave-initrd");
        assert_eq!(a, b);
        // The PolicyPCR digest of an all-zero PCR 11: TPM2's rule, by hand.
        let mut h = Sha256::new();
        h.update([0u8; 32]);
        h.update([0, 0, 1, 0x7f, 0, 0, 0, 1, 0, 0x0b, 3, 0, 8, 0]);
        h.update(Sha256::digest([0u8; 32]));
        let want: [u8; 32] = h.finalize().into();
        assert_eq!(policy(&[0u8; 32]), want);
    }

    #[test]
    fn stub_versions_and_the_sections_they_measure() {
        assert_eq!(
            stub_version(b"#### LoaderInfo: systemd-stub 252.39-1~deb12u2 ####"),
            Some(252)
        );
        assert_eq!(stub_version(b"nothing"), None);
        assert!(!measured_sections(Some(252)).contains(&".uname"));
        assert_eq!(
            measured_sections(Some(255))[6..],
            [".uname", ".sbat", ".pcrpkey"]
        );
        // From 256 the microcode, after the initrd.
        assert_eq!(
            measured_sections(Some(257))[3..6],
            [".initrd", ".ucode", ".splash"]
        );
        assert!(!measured_sections(Some(255)).contains(&".ucode"));
        assert!(check_phases(&["enter-initrd:leave-initrd".into()]).is_ok());
        for bad in ["", "a::b", "a b", ":x"] {
            assert!(check_phases(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
