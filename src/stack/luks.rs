//! The cipher of a LUKS device, from its header: what dm-crypt will ask the
//! kernel's crypto API for, so that a hostonly image carries those modules
//! and no others.
//!
//! Both versions start with the magic `LUKS\xba\xbe` and a big-endian
//! version at 6. LUKS1 keeps `cipher-name` (32 bytes) at 8 and
//! `cipher-mode` (32 bytes) at 40, NUL-padded. LUKS2 keeps its header size
//! (big-endian u64) at 8 and a JSON area after the 4 KiB binary header;
//! its data segment and each key slot's area name a cipher as
//! `"encryption":"aes-xts-plain64"` (cryptsetup decrypts a key slot through
//! the kernel's crypto user interface, dm-crypt the data). At most
//! [`MAX_JSON`] bytes of JSON are read.

use std::path::Path;

use super::superblock::read_device;

const MAGIC: &[u8; 6] = b"LUKS\xba\xbe";
/// The JSON area read of a LUKS2 header (cryptsetup's default is 12 KiB;
/// the format allows up to 4 MiB).
pub const MAX_JSON: usize = 64 * 1024;
/// The longest cipher specification taken (cryptsetup's limit is 32 for
/// each part).
const MAX_SPEC: usize = 128;
/// The distinct ciphers taken from one header.
pub const MAX_CIPHERS: usize = 8;

/// A cipher specification as cryptsetup writes it: letters, digits and
/// `-_:()`.
fn valid(spec: &str) -> bool {
    !spec.is_empty()
        && spec.len() <= MAX_SPEC
        && spec
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_:()".contains(&b))
}

fn cstr(b: &[u8]) -> &[u8] {
    b.split(|&c| c == 0).next().unwrap_or(b)
}

/// The cipher specifications (`aes-xts-plain64`) of the LUKS header in
/// `buf` (which starts at the header): the data's and, for LUKS2, each key
/// slot area's, each once, at most [`MAX_CIPHERS`].
pub fn ciphers_of(buf: &[u8]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if buf.get(..6) != Some(MAGIC.as_slice()) {
        return out;
    }
    let version = buf.get(6..8).map(|v| u16::from_be_bytes([v[0], v[1]]));
    match version {
        Some(1) => {
            let (Some(name), Some(mode)) = (buf.get(8..40), buf.get(40..72)) else {
                return out;
            };
            let (Ok(name), Ok(mode)) = (
                std::str::from_utf8(cstr(name)),
                std::str::from_utf8(cstr(mode)),
            ) else {
                return out;
            };
            let spec = if mode.is_empty() {
                name.to_string()
            } else {
                format!("{name}-{mode}")
            };
            if valid(&spec) {
                out.push(spec);
            }
        }
        Some(2) => {
            let Some(json) = buf.get(4096..) else {
                return out;
            };
            let mut json = cstr(json);
            let key = b"\"encryption\"";
            while out.len() < MAX_CIPHERS {
                let Some(at) = json.windows(key.len()).position(|w| w == key) else {
                    break;
                };
                json = &json[at + key.len()..];
                let value = json
                    .trim_ascii_start()
                    .strip_prefix(b":")
                    .map(<[u8]>::trim_ascii_start)
                    .and_then(|r| r.strip_prefix(b"\""))
                    .and_then(|r| Some(&r[..r.iter().position(|&c| c == b'"')?]))
                    .and_then(|v| std::str::from_utf8(v).ok());
                if let Some(spec) = value.filter(|v| valid(v)) {
                    if !out.iter().any(|o| o == spec) {
                        out.push(spec.to_string());
                    }
                }
            }
        }
        _ => {}
    }
    out
}

/// What a LUKS header says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub ciphers: Vec<String>,
    /// A `systemd-tpm2` token is enrolled.
    pub tpm2: bool,
    /// A `clevis` token is (a key slot bound to a Tang server, or a
    /// policy of several, by `clevis luks bind`).
    pub clevis: bool,
}

/// The header of the LUKS device at `path` (a block device; a regular
/// file in tests): at most two bounded reads.
pub fn read_header(path: &Path) -> Header {
    let Some(buf) = read_header_bytes(path) else {
        return Header::default();
    };
    Header {
        ciphers: ciphers_of(&buf),
        tpm2: has_tpm2_token(&buf),
        clevis: has_clevis_token(&buf),
    }
}

fn read_header_bytes(path: &Path) -> Option<Vec<u8>> {
    let head = read_device(path, 0, 16)?;
    if head.len() < 16 || head[..6] != MAGIC[..] {
        return None;
    }
    let len = match u16::from_be_bytes([head[6], head[7]]) {
        1 => 72,
        _ => {
            let size = u64::from_be_bytes(head[8..16].try_into().unwrap_or([0; 8]));
            usize::try_from(size)
                .unwrap_or(usize::MAX)
                .clamp(4096, 4096 + MAX_JSON)
        }
    };
    read_device(path, 0, len)
}

/// Whether the LUKS2 header in `buf` holds a `systemd-tpm2` token (a key
/// slot enrolled with `systemd-cryptenroll --tpm2-device`).
pub fn has_tpm2_token(buf: &[u8]) -> bool {
    has_token(buf, b"\"systemd-tpm2\"")
}

/// Whether the LUKS2 header in `buf` holds a `clevis` token (a key slot
/// bound with `clevis luks bind`; LUKS1 keeps clevis' bindings in
/// luksmeta's area, which is not read here).
pub fn has_clevis_token(buf: &[u8]) -> bool {
    has_token(buf, b"\"clevis\"")
}

/// Whether the JSON area of the LUKS2 header in `buf` names `quoted` (a
/// token type, with its quotes: no other field of the area takes such a
/// value).
fn has_token(buf: &[u8], quoted: &[u8]) -> bool {
    buf.get(..8) == Some(b"LUKS\xba\xbe\x00\x02".as_slice())
        && buf
            .get(4096..)
            .is_some_and(|json| cstr(json).windows(quoted.len()).any(|w| w == quoted))
}

/// The kernel module names and aliases a cipher specification asks for:
/// `aes-xts-plain64` gives `crypto-aes` and `crypto-xts`;
/// `aes-cbc-essiv:sha256` also `crypto-essiv` and `crypto-sha256`;
/// `capi:xts(aes)-plain64` gives the same as the first. The IV generators
/// `plain`, `plain64`, `plain64be`, `benbi` and `null` are dm-crypt's own.
pub fn modules_of(spec: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: &str| {
        let n = n.trim();
        if !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !["plain", "plain64", "plain64be", "benbi", "null", "random"].contains(&n)
        {
            let q = format!("crypto-{n}");
            if !names.contains(&q) {
                names.push(q);
            }
        }
    };
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| "-:()".contains(c))
            .map(str::to_string)
            .collect()
    };
    let spec = spec.strip_prefix("capi:").unwrap_or(spec);
    for w in words(spec) {
        add(&w);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn luks1(name: &str, mode: &str) -> Vec<u8> {
        let mut b = vec![0u8; 592];
        b[..6].copy_from_slice(MAGIC);
        b[6..8].copy_from_slice(&1u16.to_be_bytes());
        b[8..8 + name.len()].copy_from_slice(name.as_bytes());
        b[40..40 + mode.len()].copy_from_slice(mode.as_bytes());
        b
    }

    fn luks2(json: &str, hdr_size: u64) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[..6].copy_from_slice(MAGIC);
        b[6..8].copy_from_slice(&2u16.to_be_bytes());
        b[8..16].copy_from_slice(&hdr_size.to_be_bytes());
        b.extend_from_slice(json.as_bytes());
        b.resize(hdr_size.max(4096 + json.len() as u64) as usize, 0);
        b
    }

    #[test]
    fn reads_the_ciphers_of_both_versions() {
        assert_eq!(
            ciphers_of(&luks1("aes", "xts-plain64")),
            ["aes-xts-plain64"]
        );
        assert_eq!(
            ciphers_of(&luks1("serpent", "cbc-essiv:sha256")),
            ["serpent-cbc-essiv:sha256"]
        );
        // A key slot's area and the data segment, each once.
        let json = r#"{"keyslots":{"0":{"type":"luks2","area":{"type":"raw","encryption":"aes-xts-plain64"}},"1":{"area":{"encryption":"aes-xts-plain64"}}},"segments":{"0":{"type":"crypt","encryption" : "twofish-xts-plain64"}}}"#;
        assert_eq!(
            ciphers_of(&luks2(json, 16384)),
            ["aes-xts-plain64", "twofish-xts-plain64"]
        );
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("luks2");
        std::fs::write(&p, luks2(json, 16384)).unwrap();
        assert_eq!(read_header(&p).ciphers.len(), 2);
        let p1 = d.path().join("luks1");
        std::fs::write(&p1, luks1("aes", "cbc-essiv:sha256")).unwrap();
        assert_eq!(read_header(&p1).ciphers, ["aes-cbc-essiv:sha256"]);
    }

    #[test]
    fn a_tpm2_token_is_seen() {
        let json = r#"{"tokens":{"0":{"type":"systemd-tpm2","keyslots":["1"]}},"segments":{"0":{"encryption":"aes-xts-plain64"}}}"#;
        assert!(has_tpm2_token(&luks2(json, 16384)));
        assert!(!has_tpm2_token(&luks2(r#"{"tokens":{}}"#, 16384)));
        assert!(!has_tpm2_token(&luks1("aes", "xts-plain64")));
        assert!(!has_clevis_token(&luks2(json, 16384)));
        assert_eq!(
            header_of(json),
            Header {
                ciphers: vec!["aes-xts-plain64".into()],
                tpm2: true,
                clevis: false,
            }
        );
    }

    /// What `read_header` reads of a LUKS2 header with JSON area `json`, from a file.
    fn header_of(json: &str) -> Header {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h");
        std::fs::write(&p, luks2(json, 16384)).unwrap();
        read_header(&p)
    }

    #[test]
    fn a_clevis_token_is_seen() {
        let json = r#"{"keyslots":{"0":{"type":"luks2"},"1":{"type":"luks2"}},"tokens":{"0":{"type":"clevis","keyslots":["1"],"jwe":{"ciphertext":"","encrypted_key":"","iv":"","protected":"eyJhbGciOiJFQ0RILUVTIiwiY2xldmlzIjp7InBpbiI6InRhbmcifX0","tag":""}}},"segments":{"0":{"encryption":"aes-xts-plain64"}}}"#;
        assert!(has_clevis_token(&luks2(json, 16384)));
        assert!(!has_tpm2_token(&luks2(json, 16384)));
        assert!(!has_clevis_token(&luks2(r#"{"tokens":{}}"#, 16384)));
        assert!(!has_clevis_token(&luks1("aes", "xts-plain64")));
        assert_eq!(
            header_of(json),
            Header {
                ciphers: vec!["aes-xts-plain64".into()],
                tpm2: false,
                clevis: true,
            }
        );
    }

    #[test]
    fn hostile_headers_give_nothing() {
        // Not LUKS, an unknown version, a short header, no closing quote,
        // characters no cipher has.
        assert!(ciphers_of(b"LUKS").is_empty());
        assert!(ciphers_of(&[0u8; 4096]).is_empty());
        let mut v3 = luks1("aes", "xts-plain64");
        v3[7] = 3;
        assert!(ciphers_of(&v3).is_empty());
        assert!(ciphers_of(&luks2(r#"{"encryption":"aes"#, 8192)).is_empty());
        assert!(ciphers_of(&luks2(r#"{"encryption":"aes;rm -rf /"}"#, 8192)).is_empty());
        assert!(ciphers_of(&luks1("a b", "c")).is_empty());
        // A thousand distinct ciphers: MAX_CIPHERS are taken.
        let many: String = (0..1000)
            .map(|i| format!(r#""encryption":"c{i}-xts-plain64","#))
            .collect();
        assert_eq!(
            ciphers_of(&luks2(&many, 4096 + many.len() as u64)).len(),
            MAX_CIPHERS
        );
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("huge");
        let mut h = luks2(r#"{"encryption":"aes-xts-plain64"}"#, 8192);
        h[8..16].copy_from_slice(&u64::MAX.to_be_bytes());
        std::fs::write(&p, &h).unwrap();
        // The header claims 16 EiB: at most MAX_JSON is read, and it is found.
        assert_eq!(read_header(&p).ciphers, ["aes-xts-plain64"]);
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(read_header(&fifo).ciphers.is_empty());
    }

    #[test]
    fn modules_of_cipher_specifications() {
        assert_eq!(modules_of("aes-xts-plain64"), ["crypto-aes", "crypto-xts"]);
        assert_eq!(
            modules_of("aes-cbc-essiv:sha256"),
            ["crypto-aes", "crypto-cbc", "crypto-essiv", "crypto-sha256"]
        );
        assert_eq!(
            modules_of("capi:xts(aes)-plain64"),
            ["crypto-xts", "crypto-aes"]
        );
        assert_eq!(modules_of("aes-ecb-null"), ["crypto-aes", "crypto-ecb"]);
    }
}
