//! md superblocks, for an array's UUID when md/uuid is missing (kernels
//! before 5.9): the image of a member's superblock in sysfs
//! (`md/dev-NAME/super`), or the member device itself.
//!
//! Version 1.x: at 8 KiB from the end rounded down to 4 KiB (1.0), at the
//! start (1.1) or at 4 KiB (1.2); little-endian `magic` at 0, `major_version`
//! at 4, `set_uuid` (16 bytes) at 16, `set_name` (32 bytes) at 32.
//! Version 0.90: in the last 64 KiB-aligned 64 KiB of the device, in the
//! host's byte order; 32-bit words: `md_magic` (0), `major_version` (1),
//! `set_uuid0` (5), `set_uuid1..3` (13..15).
//!
//! mdadm prints a UUID as four 8-digit groups: for 1.x the 16 bytes in
//! order; for 0.90 each word as a number. md/uuid prints the bytes the
//! kernel keeps in order (for 0.90 those are the words as they lie in
//! memory), so 0.90's groups read back as host-order words.

use std::io::Read;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

pub const MD_MAGIC: u32 = 0xa92b_4efc;
/// What is read of a superblock.
pub const SB_BYTES: usize = 4096;

/// What a superblock says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MdSuper {
    /// mdadm's form.
    pub uuid: String,
    /// 1.x's `set_name` (`host:name`), when set.
    pub name: Option<String>,
}

fn groups(words: [u32; 4]) -> String {
    format!(
        "{:08x}:{:08x}:{:08x}:{:08x}",
        words[0], words[1], words[2], words[3]
    )
}

fn is_090(metadata: &str) -> bool {
    metadata == "0.90" || metadata == "0.9"
}

/// The array's UUID in mdadm's form from its 16 bytes as the kernel keeps them.
pub fn uuid_of_bytes(b: &[u8; 16], metadata: &str) -> String {
    let w = |i: usize| {
        let four = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if is_090(metadata) {
            u32::from_ne_bytes(four)
        } else {
            u32::from_be_bytes(four)
        }
    };
    groups([w(0), w(4), w(8), w(12)])
}

/// md/uuid's text (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`) in mdadm's form.
pub fn uuid_from_sysfs(text: &str, metadata: &str) -> Option<String> {
    let hex: String = text.trim().chars().filter(|&c| c != '-').collect();
    if hex.len() != 32 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut b = [0u8; 16];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(uuid_of_bytes(&b, metadata))
}

/// Parses a superblock that starts at `buf[0]`.
pub fn parse(buf: &[u8], metadata: &str) -> Option<MdSuper> {
    let word = |i: usize, ne: bool| -> Option<u32> {
        let s: [u8; 4] = buf.get(4 * i..4 * i + 4)?.try_into().ok()?;
        Some(if ne {
            u32::from_ne_bytes(s)
        } else {
            u32::from_le_bytes(s)
        })
    };
    if is_090(metadata) {
        if word(0, true)? != MD_MAGIC || word(1, true)? != 0 {
            return None;
        }
        let w = [
            word(5, true)?,
            word(13, true)?,
            word(14, true)?,
            word(15, true)?,
        ];
        return Some(MdSuper {
            uuid: groups(w),
            name: None,
        });
    }
    if !metadata.starts_with("1.") || word(0, false)? != MD_MAGIC || word(1, false)? != 1 {
        return None;
    }
    let uuid: [u8; 16] = buf.get(16..32)?.try_into().ok()?;
    let raw = buf.get(32..64)?;
    let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    let name = String::from_utf8_lossy(&raw[..end]).into_owned();
    Some(MdSuper {
        uuid: uuid_of_bytes(&uuid, metadata),
        name: (!name.is_empty()).then_some(name),
    })
}

/// Where the superblock lies on a member of `size` bytes.
pub fn offset(metadata: &str, size: u64) -> Option<u64> {
    let sectors = size / 512;
    match metadata {
        "1.0" => Some((sectors.checked_sub(16)? & !7) * 512),
        "1.1" => Some(0),
        "1.2" => Some(4096),
        m if is_090(m) => Some(((sectors & !127).checked_sub(128)?) * 512),
        _ => None,
    }
}

/// Reads the superblock of the member at `path` (a block device, or a
/// regular file in tests) of `size` bytes: one bounded read, no following
/// a FIFO or socket.
pub fn read_member(path: &Path, metadata: &str, size: u64) -> Option<MdSuper> {
    let at = offset(metadata, size)?;
    parse(&read_device(path, at, SB_BYTES)?, metadata)
}

/// Reads up to `len` bytes at `at` of the block device (or, in tests, the
/// regular file) at `path`: one bounded read, opened without blocking and
/// never from a FIFO or socket. A short device gives what it has.
pub(super) fn read_device(path: &Path, at: u64, len: usize) -> Option<Vec<u8>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let t = f.metadata().ok()?.file_type();
    if !t.is_block_device() && !t.is_file() {
        return None;
    }
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    buf.truncate(got);
    Some(buf)
}

/// Reads at most `max` bytes of a regular file (sysfs attributes are
/// regular files), opened without blocking on a FIFO.
pub fn read_bounded(path: &Path, max: usize) -> Option<Vec<u8>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut out = Vec::new();
    f.take(max as u64).read_to_end(&mut out).ok()?;
    Some(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A 1.x superblock with this UUID and name.
    pub(crate) fn v1(uuid: [u8; 16], name: &str) -> Vec<u8> {
        let mut b = vec![0u8; SB_BYTES];
        b[0..4].copy_from_slice(&MD_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        b[16..32].copy_from_slice(&uuid);
        b[32..32 + name.len()].copy_from_slice(name.as_bytes());
        b
    }

    const UUID: [u8; 16] = [
        0x3b, 0x7a, 0xb5, 0xe9, 0x4b, 0x9c, 0xa0, 0xa7, 0xf6, 0xa2, 0x3e, 0xe2, 0xcf, 0x4e, 0x36,
        0xe5,
    ];

    #[test]
    fn a_1x_superblock_at_each_offset() {
        let d = tempfile::tempdir().unwrap();
        let size = 1024 * 1024u64 + 3 * 512;
        for (meta, at) in [
            ("1.2", 4096u64),
            ("1.1", 0),
            ("1.0", ((size / 512 - 16) & !7) * 512),
        ] {
            let p = d.path().join(meta);
            let mut img = vec![0u8; size as usize];
            img[at as usize..at as usize + SB_BYTES].copy_from_slice(&v1(UUID, "host:root"));
            std::fs::write(&p, &img).unwrap();
            let sb = read_member(&p, meta, size).unwrap();
            assert_eq!(sb.uuid, "3b7ab5e9:4b9ca0a7:f6a23ee2:cf4e36e5", "{meta}");
            assert_eq!(sb.name.as_deref(), Some("host:root"));
            // Another version's place holds nothing.
            let other = if meta == "1.2" { "1.1" } else { "1.2" };
            assert_eq!(read_member(&p, other, size), None);
        }
        assert_eq!(
            uuid_from_sysfs("3b7ab5e9-4b9c-a0a7-f6a2-3ee2cf4e36e5\n", "1.2").as_deref(),
            Some("3b7ab5e9:4b9ca0a7:f6a23ee2:cf4e36e5")
        );
        assert_eq!(uuid_from_sysfs("nonsense", "1.2"), None);
    }

    #[test]
    fn a_090_superblock_at_the_end() {
        let d = tempfile::tempdir().unwrap();
        let size = 2 * 1024 * 1024u64 + 5 * 512;
        let at = (((size / 512) & !127) - 128) * 512;
        let mut img = vec![0u8; size as usize];
        let mut put = |w: usize, v: u32| {
            let o = at as usize + 4 * w;
            img[o..o + 4].copy_from_slice(&v.to_ne_bytes());
        };
        put(0, MD_MAGIC);
        put(5, 0x1122_3344);
        put(13, 0x5566_7788);
        put(14, 0x99aa_bbcc);
        put(15, 0xddee_ff00);
        let p = d.path().join("m");
        std::fs::write(&p, &img).unwrap();
        let sb = read_member(&p, "0.90", size).unwrap();
        assert_eq!(sb.uuid, "11223344:55667788:99aabbcc:ddeeff00");
        assert_eq!(sb.name, None);
        // The kernel's md/uuid prints those words as they lie in memory.
        let mut b = [0u8; 16];
        for (i, w) in [0x1122_3344u32, 0x5566_7788, 0x99aa_bbcc, 0xddee_ff00]
            .iter()
            .enumerate()
        {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
        }
        assert_eq!(uuid_of_bytes(&b, "0.90"), sb.uuid);
        // Too small a device, a short file, a FIFO: nothing, no hang.
        assert_eq!(read_member(&p, "0.90", 1000), None);
        let short = d.path().join("short");
        std::fs::write(&short, [0u8; 10]).unwrap();
        assert_eq!(read_member(&short, "1.2", size), None);
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(read_member(&fifo, "1.2", size), None);
        assert_eq!(read_bounded(&fifo, 10), None);
    }
}
