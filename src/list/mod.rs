//! gen_init_cpio list files (the kernel's `usr/gen_init_cpio` input).
//!
//! Input: the bytes of a list file. Output: entries in list order, plus
//! warnings. Two readers share the entry types:
//!
//! * the strict reader (default) accepts the lists gen_init_cpio writes
//!   correctly and stops, with file, line and column, where gen_init_cpio
//!   would silently do something harmful (a trailing `# note` on a file line
//!   becoming hardlinks named `#` and `note`, an indented line being skipped
//!   as an unknown type, an unknown type, a name the kernel would drop);
//! * the compat reader (`--compat`) reproduces the kernel tool's C parsing
//!   (fgets line chunks, strtok, sscanf conversions) so that it accepts
//!   exactly what gen_init_cpio accepts and reads it the same way.
//!
//! `export` goes the other way, from entries to a list.

mod compat;
mod export;
mod strict;
mod syntax;

pub use export::write_list;
pub use syntax::{process_env, EnvLookup, ListOptions, ParsedList};

use std::sync::Arc;

use crate::error::Result;

/// Reads a list file's bytes; `file` names it in messages.
pub fn parse(bytes: &[u8], file: &str, opts: &ListOptions) -> Result<ParsedList> {
    let file: Arc<str> = Arc::from(file);
    if opts.compat {
        compat::parse(bytes, file, opts.env)
    } else {
        strict::parse(bytes, file, opts.env)
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::PathBuf;

    use super::*;
    use crate::entry::{DeviceKind, Kind};

    fn env(name: &str) -> Option<OsString> {
        match name {
            "FIX" => Some("/src".into()),
            "EMPTY" => Some("".into()),
            _ => None,
        }
    }

    fn strict(text: &str) -> Result<ParsedList> {
        parse(
            text.as_bytes(),
            "t.list",
            &ListOptions {
                compat: false,
                env: &env,
            },
        )
    }

    fn compat(text: &[u8]) -> Result<ParsedList> {
        parse(
            text,
            "t.list",
            &ListOptions {
                compat: true,
                env: &env,
            },
        )
    }

    fn err_at(r: Result<ParsedList>) -> (u32, u32, String) {
        match r {
            Err(e) => {
                let o = e.origin().expect("located error").clone();
                (o.line, o.column, e.to_string())
            }
            Ok(p) => panic!("expected an error, got {:?}", p.entries),
        }
    }

    #[test]
    fn reads_every_type() {
        let p = strict(
            "# c\n\ndir /dev 0755 0 0\nnod /dev/console 0600 0 5 c 5 1\n\
             slink /bin/sh busybox 0777 0 0\npipe /p 0644 1 2\nsock /s 0600 0 0\n\
             file /init ${FIX}/init 0755 0 0 /sbin/init linuxrc\n",
        )
        .unwrap();
        let kinds: Vec<&str> = p.entries.iter().map(|e| e.kind.keyword()).collect();
        assert_eq!(kinds, ["dir", "nod", "slink", "pipe", "sock", "file"]);
        let file = &p.entries[5];
        assert_eq!(file.name, b"init");
        match &file.kind {
            Kind::File { source, links } => {
                assert_eq!(source.path, PathBuf::from("/src/init"));
                assert_eq!(&links[..], &[b"sbin/init".to_vec(), b"linuxrc".to_vec()]);
            }
            k => panic!("{k:?}"),
        }
        assert_eq!(p.entries[1].gid, 5);
        assert_eq!(p.entries[3].uid, 1);
    }

    #[test]
    fn trailing_comment_on_file_line_is_an_error() {
        let (line, col, msg) = err_at(strict("dir /a 0755 0 0\nfile /a/b /x 0644 0 0 # note\n"));
        assert_eq!((line, col), (2, 23));
        assert!(msg.contains("hardlinks"), "{msg}");
        // --compat makes hardlinks of the words, as the kernel tool does.
        let p = compat(b"file /a/b /x 0644 0 0 # note\n").unwrap();
        match &p.entries[0].kind {
            Kind::File { links, .. } => assert_eq!(&links[..], &[b"#".to_vec(), b"note".to_vec()]),
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn indented_lines_are_errors_and_compat_skips_them() {
        let (line, col, msg) = err_at(strict("dir /a 0755 0 0\n  # note\n"));
        assert_eq!((line, col), (2, 3));
        assert!(msg.contains("indented comment"), "{msg}");
        let (_, col, _) = err_at(strict("\tdir /a 0755 0 0\n"));
        assert_eq!(col, 1);
        let p = compat(b"  # note\n\tdir /a 0755 0 0\ndir /b 0755 0 0\n").unwrap();
        assert_eq!(p.entries.len(), 1);
        assert_eq!(p.warnings.len(), 2);
    }

    #[test]
    fn unknown_type_suggests_the_nearest() {
        let (line, col, msg) = err_at(strict("fiel /a /x 0644 0 0\n"));
        assert_eq!((line, col), (1, 1));
        let e = strict("fiel /a /x 0644 0 0\n").unwrap_err();
        assert_eq!(e.hint(), Some("did you mean `file`?"));
        assert!(msg.contains("fiel"));
    }

    #[test]
    fn numbers_are_checked() {
        assert_eq!(err_at(strict("dir /a 0789 0 0\n")).1, 8);
        assert_eq!(err_at(strict("dir /a 0755 99999999999 0\n")).1, 13);
        assert_eq!(err_at(strict("dir /a 0755 0\n")).1, 14);
        assert_eq!(err_at(strict("dir /a 0755 0 0 extra\n")).1, 17);
        assert_eq!(err_at(strict("nod /a 0755 0 0 x 1 2\n")).1, 17);
        assert_eq!(err_at(strict("dir /a 0100755 0 0\n")).1, 8);
        let p = strict("dir /a 0755 -1 4294967295\n").unwrap();
        assert_eq!((p.entries[0].uid, p.entries[0].gid), (u32::MAX, u32::MAX));
    }

    #[test]
    fn compat_reads_numbers_like_sscanf() {
        let p = compat(b"dir /a 0755 -1 -2 junk\nnod /n 0600 0 0 x 4294967297 7\n").unwrap();
        assert_eq!(p.entries[0].mode, 0o755);
        assert_eq!(
            (p.entries[0].uid, p.entries[0].gid),
            (u32::MAX, u32::MAX - 1)
        );
        assert_eq!(
            p.entries[1].kind,
            Kind::Node {
                kind: DeviceKind::Char,
                major: 1,
                minor: 7
            }
        );
        // `%d` stops at `abc`: the line fails as in gen_init_cpio.
        assert!(compat(b"dir /a 0755abc 0 0\n").is_err());
    }

    #[test]
    fn env_expansion() {
        let (line, col, msg) = err_at(strict("file /a ${FIX}/${NOPE} 0644 0 0\n"));
        assert_eq!((line, col), (1, 16));
        assert!(msg.contains("NOPE"), "{msg}");
        let p = compat(b"file /a ${FIX}/${NOPE}x 0644 0 0\n").unwrap();
        match &p.entries[0].kind {
            Kind::File { source, .. } => assert_eq!(source.path, PathBuf::from("/src/x")),
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn duplicates_and_names() {
        let (line, _, msg) = err_at(strict("dir /a 0755 0 0\nfile /a /x 0644 0 0\n"));
        assert_eq!(line, 2);
        assert!(msg.contains("line 1"), "{msg}");
        assert!(strict("dir /a 0755 0 0\ndir a 0755 0 0\n").is_ok());
        let long = "x".repeat(4096);
        assert!(err_at(strict(&format!("dir /{long} 0755 0 0\n")))
            .2
            .contains("4096 bytes"));
        assert!(strict(&format!("dir /{} 0755 0 0\n", &long[..4095])).is_ok());
        assert!(err_at(strict("dir /a/../b 0755 0 0\n")).2.contains(".."));
    }

    #[test]
    fn non_utf8_names_pass_through() {
        let p = parse(
            b"dir /\xff\xfe 0755 0 0\n",
            "t",
            &ListOptions {
                compat: false,
                env: &env,
            },
        )
        .unwrap();
        assert_eq!(p.entries[0].name, b"\xff\xfe");
    }

    #[test]
    fn compat_line_quirks() {
        // A lone word is skipped like a blank line; "file \n" fails.
        assert_eq!(compat(b"file\ndir /a 0755 0 0\n").unwrap().entries.len(), 1);
        assert!(compat(b"file \n").is_err());
        // A non-ASCII first byte of a hardlink name ends the link list.
        let p = compat(b"file /a /x 0644 0 0 \xffb c\n").unwrap();
        match &p.entries[0].kind {
            Kind::File { links, .. } => assert!(links.is_empty()),
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn missing_parent_is_a_warning() {
        let p = strict("file /bin/sh /x 0755 0 0\n").unwrap();
        assert_eq!(p.warnings.len(), 1);
        assert!(p.warnings[0].message.contains("`bin`"));
    }
}
