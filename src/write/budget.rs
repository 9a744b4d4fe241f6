//! The size budget: an image is written into its output's filesystem only
//! when it fits there (and under `[image] max_size`), so that a full /boot
//! refuses the build before anything is written instead of failing half
//! way.
//!
//! An uncompressed image's size is exact from the plan. A compressed one
//! has a bound (no compressor the kernel reads grows its input by more
//! than [`overhead`]); when the bound fits, the image is written as usual.
//! When it does not, the image is first written into memory to learn its
//! size, then refused or copied into place. The old image is replaced by a
//! rename, so it stays whole until the new one is complete: its bytes are
//! freed only after, and do not count as room.

use std::path::PathBuf;

use crate::compress::Compression;
use crate::entry::Origin;
use crate::error::Error;
use crate::plan::ImageLayout;

/// What a build may take: the output filesystem's free space, the
/// manifest's `max_size`, or both.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// Bytes free for the image in this directory's filesystem.
    pub free: Option<(u64, PathBuf)>,
    /// `[image] max_size` and where it was set.
    pub max: Option<(u64, Origin)>,
}

impl Limits {
    /// The smaller of the two, if any.
    pub fn bytes(&self) -> Option<u64> {
        match (&self.free, &self.max) {
            (Some((f, _)), Some((m, _))) => Some((*f).min(*m)),
            (Some((f, _)), None) => Some(*f),
            (None, Some((m, _))) => Some(*m),
            (None, None) => None,
        }
    }
}

/// The most a compressor the kernel reads adds to `n` bytes: zstd and lz4
/// add under 0.5 %, stored deflate and lzma2 blocks less, bzip2 about 1 %,
/// plus headers.
pub fn overhead(n: u64) -> u64 {
    n / 64 + (64 << 10)
}

/// The image's size when every segment is uncompressed (exact), else a
/// bound: (bytes, exact).
pub fn bound(image: &ImageLayout) -> (u64, bool) {
    let mut total = 0u64;
    let mut exact = true;
    for part in &image.parts {
        // The NULs before a segment: at most its start alignment.
        total += part.start_align.max(4);
        total += part.layout.size;
        if part.segment.compression != Compression::None {
            exact = false;
            total += overhead(part.layout.size) + 64 * part.chunks.len() as u64;
        }
    }
    (total, exact)
}

fn mib(n: u64) -> String {
    format!("{n} bytes ({:.1} MiB)", n as f64 / f64::from(1 << 20))
}

/// The error for an image of `size` bytes over `limits`.
pub fn refuse(image: &ImageLayout, size: u64, limits: &Limits, exact: bool) -> Error {
    let what = if exact { "needs" } else { "needs at least" };
    let mut largest: Vec<(u64, String)> = image
        .parts
        .iter()
        .flat_map(|p| p.layout.records())
        .filter(|r| r.header.filesize > 0)
        .map(|r| {
            (
                u64::from(r.header.filesize),
                String::from_utf8_lossy(r.name).into_owned(),
            )
        })
        .collect();
    largest.sort_by(|a, b| b.cmp(a));
    largest.truncate(5);
    let largest = largest
        .iter()
        .map(|(n, name)| format!("{name} ({:.1} MiB)", *n as f64 / f64::from(1 << 20)))
        .collect::<Vec<_>>()
        .join(", ");
    let shrink = "make the image smaller: the hostonly profile, `exclude` in a [[module]] \
                  rule for drivers this machine does not have, or a stronger compression \
                  (zstd `level = 19`, or `compression = \"xz\"` in the main [[segment]]); \
                  `composer plan` lists every file by size";
    match (&limits.max, &limits.free) {
        (Some((max, origin)), _) if size > *max => Error::at(
            origin.clone(),
            format!(
                "the image {what} {}, more than [image] max_size = {}; nothing was written \
                 (the largest files: {largest})",
                mib(size),
                mib(*max)
            ),
        )
        .with_hint(format!("raise max_size, or {shrink}")),
        (_, Some((free, dir))) => Error::usage(format!(
            "the image {what} {}, and {} has {} free; nothing was written, the old image is \
             untouched (the largest files: {largest})",
            mib(size),
            dir.display(),
            mib(*free)
        ))
        .with_hint(format!(
            "free space there (images of kernels no longer installed), write elsewhere with \
             -o, or {shrink}"
        )),
        _ => Error::usage(format!("the image {what} {}", mib(size))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overhead_covers_each_compressor_on_incompressible_data() {
        // Random bytes: the worst case of every method.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let data: Vec<u8> = (0..(1 << 20) + 12345)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for method in Compression::ALL {
            if method == Compression::None || !method.can_encode() {
                continue;
            }
            let mut out = Vec::new();
            let opts = crate::compress::EncodeOptions {
                method,
                level: None,
                threads: 2,
            };
            crate::compress::encode(&opts, &mut &data[..], &mut out).unwrap();
            let n = data.len() as u64;
            assert!(
                (out.len() as u64) <= n + overhead(n),
                "{}: {} bytes from {n}",
                method.name(),
                out.len()
            );
        }
    }

    #[test]
    fn the_smaller_limit_counts() {
        let l = Limits {
            free: Some((100, PathBuf::from("/boot"))),
            max: None,
        };
        assert_eq!(l.bytes(), Some(100));
        let l = Limits {
            max: Some((50, Origin::default())),
            ..l
        };
        assert_eq!(l.bytes(), Some(50));
        assert_eq!(Limits::default().bytes(), None);
    }
}
