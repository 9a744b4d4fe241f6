//! `composer verify`: everything the kernel would silently drop or reject.
//!
//! Input: an [`Image`]. Output: [`Finding`]s, each with the place it is
//! at. The walk replays what init/initramfs.c does with each entry: which
//! entries it skips, which names it cannot create because their parent
//! directory is missing (it never creates parents), which checksums it
//! refuses, and which entries its hardlink table would join although they
//! are unrelated. The reader's fault (the point where the kernel stops) is
//! the last finding.

use std::collections::HashMap;

use super::tree::{components, Kind, Missing, Tree, ROOT};
use super::{Image, Place, Segment};
use crate::compress::{self, Compression};
use crate::cpio::reader::RawEntry;
use crate::entry::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};
use crate::path::escape;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub place: Place,
    pub message: String,
    /// The kernel stops unpacking here (rather than dropping one entry).
    pub fatal: bool,
}

/// The key of the kernel's hardlink table.
type LinkKey = (u32, u32, u32, u32);

struct LinkInfo {
    name: Vec<u8>,
    nlink: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    /// The data's size and digest, when it carries data.
    data: Option<(u32, Option<u64>)>,
}

/// Runs every check; the findings come in archive order, the fault last.
pub fn verify(image: &Image) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut tree = Tree::new();
    let mut links: HashMap<LinkKey, LinkInfo> = HashMap::new();
    for seg in &image.segments {
        check_stream(image, seg, &mut findings);
        for e in &seg.entries {
            let place = image.place(seg, e.offset);
            let mut report = |message: String, fatal: bool| {
                findings.push(Finding {
                    place,
                    message,
                    fatal,
                })
            };
            if let Some(skip) = e.skip {
                report(format!("{}: {}", shown(e), skip.describe()), false);
                continue;
            }
            if e.is_trailer() {
                links.clear();
                continue;
            }
            let h = &e.header;
            let kind = h.mode & S_IFMT;
            let body = (h.filesize, e.digest);
            if let (true, Some(sum)) = (kind == S_IFREG && h.crc, e.sum) {
                if sum != h.check {
                    report(
                        format!(
                            "{}: bad 070702 checksum: the header says {:08X}, the data sums \
                             to {sum:08X} (the kernel stops: \"bad data checksum\")",
                            shown(e),
                            h.check
                        ),
                        true,
                    );
                }
            }
            let known = [
                S_IFREG, S_IFDIR, S_IFLNK, S_IFCHR, S_IFBLK, S_IFIFO, S_IFSOCK,
            ];
            if !known.contains(&kind) {
                report(
                    format!(
                        "{}: unknown file type {:o} in mode {:o}: the kernel creates nothing",
                        shown(e),
                        kind >> 12,
                        h.mode
                    ),
                    false,
                );
                continue;
            }
            if e.name.is_empty() {
                report(
                    "an entry with an empty name: the kernel creates nothing".to_string(),
                    false,
                );
                continue;
            }
            let place_in = {
                let mut parts: Vec<&[u8]> = components(&e.name).collect();
                match parts.pop() {
                    None => Ok(None), // the root itself
                    Some(last) => tree.dir(ROOT, parts, true).map(|dir| Some((dir, last))),
                }
            };
            let at = match place_in {
                Ok(p) => p,
                Err(why) => {
                    let message = match why {
                        Missing::NotFound(p) => format!(
                            "{}: its parent directory `{}` does not exist (yet): the kernel \
                             drops the entry (directories must come before their content)",
                            shown(e),
                            escape(&p)
                        ),
                        Missing::NotDir(p) => format!(
                            "{}: `{}` is not a directory: the kernel drops the entry",
                            shown(e),
                            escape(&p)
                        ),
                        Missing::Loop | Missing::Symlink(_) => format!(
                            "{}: too many levels of symlinks in its path: the kernel drops \
                             the entry",
                            shown(e)
                        ),
                    };
                    report(message, false);
                    continue;
                }
            };
            if kind != S_IFDIR && kind != S_IFLNK && h.nlink >= 2 {
                let key = (h.devmajor, h.devminor, h.ino, kind);
                match links.get_mut(&key) {
                    None => {
                        links.insert(
                            key,
                            LinkInfo {
                                name: e.name.clone(),
                                nlink: h.nlink,
                                mode: h.mode,
                                uid: h.uid,
                                gid: h.gid,
                                data: (h.filesize > 0).then_some(body),
                            },
                        );
                    }
                    Some(first) => {
                        let mut why = Vec::new();
                        if first.data.is_some() && h.filesize > 0 && first.data != Some(body) {
                            why.push("both carry data, and it differs".to_string());
                        }
                        if first.mode != h.mode {
                            why.push(format!("modes {:o} and {:o}", first.mode, h.mode));
                        }
                        if (first.uid, first.gid) != (h.uid, h.gid) {
                            why.push(format!(
                                "owners {}:{} and {}:{}",
                                first.uid, first.gid, h.uid, h.gid
                            ));
                        }
                        if first.nlink != h.nlink {
                            why.push(format!("nlink {} and {}", first.nlink, h.nlink));
                        }
                        if components(&first.name).eq(components(&e.name)) {
                            why.clear();
                        }
                        if !why.is_empty() {
                            report(
                                format!(
                                    "{}: shares inode {} (dev {}:{}) with `{}` and has nlink \
                                     >= 2, so the kernel makes it a hardlink of it, but they \
                                     look unrelated ({}); give unrelated entries distinct inode \
                                     numbers",
                                    shown(e),
                                    h.ino,
                                    h.devmajor,
                                    h.devminor,
                                    escape(&first.name),
                                    why.join(", ")
                                ),
                                false,
                            );
                        }
                        if h.filesize > 0 {
                            first.data = Some(body);
                        }
                    }
                }
            }
            if let Some((dir, last)) = at {
                let kind = match kind {
                    S_IFDIR => Kind::Dir,
                    S_IFLNK => Kind::Symlink(super::inspect::target(e).to_vec()),
                    _ => Kind::Other,
                };
                if last == b".." {
                    // `a/..` names a directory that is already there.
                } else {
                    tree.set(dir, last, kind);
                }
            }
        }
    }
    if let Some(f) = &image.fault {
        let message = match f.kernel {
            Some(_) => format!("{} — the kernel stops unpacking here", f.detail),
            None => f.detail.clone(),
        };
        findings.push(Finding {
            place: f.place,
            message: match f.kernel {
                Some(k) => format!("{message} (\"{k}\")"),
                None => message,
            },
            fatal: true,
        });
    }
    findings
}

/// Checks on a compressed stream that the decoder here accepts but the
/// kernel's does not.
fn check_stream(image: &Image, seg: &Segment, findings: &mut Vec<Finding>) {
    if seg.compression != Compression::Zstd {
        return;
    }
    let head = image.read_at(seg.offset, 18);
    if let Some(w) = compress::zstd_window_size(&head) {
        if w > 1 << compress::ZSTD_MAX_WINDOW_LOG {
            findings.push(Finding {
                place: Place {
                    segment: seg.index,
                    stream: None,
                    offset: seg.offset,
                },
                message: format!(
                    "zstd frame with a {w}-byte window: the kernel's decoder accepts at most \
                     8 MiB (\"decompressor failed\"); compress with --long off and level <= 19"
                ),
                fatal: true,
            });
        }
    }
}

fn shown(e: &RawEntry) -> String {
    format!("`{}`", escape(&e.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::Header;

    struct A(Vec<u8>, u32);

    impl A {
        fn new() -> A {
            A(Vec::new(), 1)
        }
        fn add(mut self, name: &str, mode: u32, nlink: u32, data: &[u8], ino: Option<u32>) -> A {
            let ino = ino.unwrap_or_else(|| {
                self.1 += 1;
                self.1
            });
            let h = Header {
                ino,
                mode,
                nlink,
                filesize: data.len() as u32,
                namesize: name.len() as u32 + 1,
                ..Header::default()
            };
            self.0.extend_from_slice(&h.encode());
            self.0.extend_from_slice(name.as_bytes());
            self.0.push(0);
            while !self.0.len().is_multiple_of(4) {
                self.0.push(0);
            }
            self.0.extend_from_slice(data);
            while !self.0.len().is_multiple_of(4) {
                self.0.push(0);
            }
            self
        }
        fn check(self) -> Vec<String> {
            let img = Image::from_bytes("t", self.0);
            verify(&img).into_iter().map(|f| f.message).collect()
        }
    }

    #[test]
    fn missing_parents_and_symlinked_parents() {
        let f = A::new()
            .add("usr", 0o40755, 2, b"", None)
            .add("usr/bin", 0o40755, 2, b"", None)
            .add("bin", 0o120777, 1, b"usr/bin", None)
            .add("bin/sh", 0o100755, 1, b"x", None)
            .add("sbin/init", 0o100755, 1, b"x", None)
            .add("bin/sh/x", 0o100755, 1, b"x", None)
            .check();
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].contains("`sbin/init`: its parent directory `sbin`"));
        assert!(f[1].contains("`usr/bin/sh` is not a directory"));
    }

    #[test]
    fn hardlinks_related_and_unrelated() {
        let ok = A::new()
            .add("a", 0o100644, 2, b"", Some(9))
            .add("b", 0o100644, 2, b"data", Some(9))
            .check();
        assert!(ok.is_empty(), "{ok:?}");
        let bad = A::new()
            .add("a", 0o100644, 2, b"one", Some(9))
            .add("b", 0o100600, 2, b"two", Some(9))
            .check();
        assert_eq!(bad.len(), 1);
        assert!(bad[0].contains("both carry data, and it differs, modes 100644 and 100600"));
    }
}
