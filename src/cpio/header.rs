//! The 110-byte newc header: a 6-byte magic and 13 fields of 8 uppercase
//! hex digits.

pub const HEADER_LEN: usize = 110;
pub const MAGIC_NEWC: &[u8; 6] = b"070701";
pub const MAGIC_CRC: &[u8; 6] = b"070702";
pub const TRAILER_NAME: &[u8] = b"TRAILER!!!";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// `070702` (with checksum) rather than `070701`.
    pub crc: bool,
    pub ino: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub mtime: u32,
    pub filesize: u32,
    pub devmajor: u32,
    pub devminor: u32,
    pub rdevmajor: u32,
    pub rdevminor: u32,
    /// Name length including its NUL and any padding NULs.
    pub namesize: u32,
    pub check: u32,
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

impl Header {
    /// The trailer entry as gen_init_cpio writes it.
    pub fn trailer(crc: bool) -> Self {
        Header {
            crc,
            nlink: 1,
            namesize: TRAILER_NAME.len() as u32 + 1,
            ..Header::default()
        }
    }

    fn fields(&self) -> [u32; 13] {
        [
            self.ino,
            self.mode,
            self.uid,
            self.gid,
            self.nlink,
            self.mtime,
            self.filesize,
            self.devmajor,
            self.devminor,
            self.rdevmajor,
            self.rdevminor,
            self.namesize,
            self.check,
        ]
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..6].copy_from_slice(if self.crc { MAGIC_CRC } else { MAGIC_NEWC });
        for (i, v) in self.fields().into_iter().enumerate() {
            let field = &mut out[6 + 8 * i..14 + 8 * i];
            for (j, b) in field.iter_mut().enumerate() {
                *b = HEX[((v >> (28 - 4 * j)) & 0xf) as usize];
            }
        }
        out
    }

    /// Decodes a header; `None` when the magic or a field is malformed
    /// (exactly 8 hex digits per field, no `0x`, as the newest kernels want).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes = bytes.get(..HEADER_LEN)?;
        let crc = match &bytes[..6] {
            m if m == MAGIC_NEWC => false,
            m if m == MAGIC_CRC => true,
            _ => return None,
        };
        let mut f = [0u32; 13];
        for (i, v) in f.iter_mut().enumerate() {
            for &c in &bytes[6 + 8 * i..14 + 8 * i] {
                *v = (*v << 4) | (c as char).to_digit(16)?;
            }
        }
        Some(Header {
            crc,
            ino: f[0],
            mode: f[1],
            uid: f[2],
            gid: f[3],
            nlink: f[4],
            mtime: f[5],
            filesize: f[6],
            devmajor: f[7],
            devminor: f[8],
            rdevmajor: f[9],
            rdevminor: f[10],
            namesize: f[11],
            check: f[12],
        })
    }
}

/// The data checksum of `070702` headers: the 32-bit wrapping sum of the
/// bytes (of a regular file's data).
pub fn checksum(bytes: &[u8]) -> u32 {
    // Four lanes keep the loop fast; wrapping addition commutes.
    let mut lanes = [0u32; 4];
    let mut chunks = bytes.chunks_exact(4);
    for c in &mut chunks {
        for i in 0..4 {
            lanes[i] = lanes[i].wrapping_add(c[i] as u32);
        }
    }
    let mut sum = lanes.iter().fold(0u32, |a, &b| a.wrapping_add(b));
    for &b in chunks.remainder() {
        sum = sum.wrapping_add(b as u32);
    }
    sum
}

/// Bytes needed to bring `offset` up to a multiple of `align` (a power of two).
pub fn pad_to(offset: u64, align: u64) -> u64 {
    (align - offset % align) % align
}

/// An entry as bytes, for tests that build archives by hand: the header
/// (its `filesize` and `namesize` as given), the name and NULs up to
/// `namesize` bytes, NULs to a multiple of 4, the data, NULs to a multiple
/// of 4. `out` must end 4-aligned.
#[cfg(test)]
pub(crate) fn push_entry(out: &mut Vec<u8>, h: &Header, name: &[u8], data: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&h.encode());
    out.extend_from_slice(name);
    while out.len() < start + HEADER_LEN + h.namesize as usize {
        out.push(0);
    }
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    out.extend_from_slice(data);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_uppercase() {
        let h = Header {
            crc: true,
            ino: 721,
            mode: 0o100644,
            uid: u32::MAX,
            namesize: 5,
            check: 0xdeadbeef,
            ..Header::default()
        };
        let bytes = h.encode();
        assert_eq!(&bytes[..14], b"070702000002D1");
        assert!(bytes[6..]
            .iter()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase()));
        assert_eq!(Header::decode(&bytes), Some(h));
    }

    #[test]
    fn checksum_wraps() {
        assert_eq!(checksum(&[0xff; 7]), 7 * 0xff);
        let big = vec![0xffu8; 1 << 25];
        assert_eq!(checksum(&big), 0xffu32.wrapping_mul(1 << 25));
    }

    #[test]
    fn rejects_0x_and_bad_magic() {
        let mut bytes = Header::trailer(false).encode();
        bytes[6..8].copy_from_slice(b"0x");
        assert_eq!(Header::decode(&bytes), None);
        let mut bytes = Header::trailer(false).encode();
        bytes[5] = b'7';
        assert_eq!(Header::decode(&bytes), None);
    }
}
