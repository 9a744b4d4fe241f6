//! The kernel tool's parsing, reproduced: lines are fgets chunks of at
//! most LINE_SIZE - 1 bytes, the type is the first strtok token, and the
//! fields are read with sscanf's conversions (%4096s, %o, %d, %c, %u).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::syntax::{generic_kind, EnvLookup, ParsedList, TYPES};
use crate::entry::{DeviceKind, Entry, Kind, Origin, Source, PATH_MAX};
use crate::error::{Error, Result, Warning};
use crate::path::{escape, ImagePath};

const LINE_SIZE: usize = 2 * PATH_MAX + 50;

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn is_graph(b: u8) -> bool {
    (0x21..=0x7e).contains(&b)
}

/// A cursor with sscanf's conversions.
struct Scan<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> Scan<'a> {
    fn skip_space(&mut self) {
        while self.pos < self.s.len() && is_space(self.s[self.pos]) {
            self.pos += 1;
        }
    }

    /// `%4096s`
    fn word(&mut self) -> Option<&'a [u8]> {
        self.skip_space();
        let start = self.pos;
        while self.pos < self.s.len() && !is_space(self.s[self.pos]) && self.pos - start < PATH_MAX
        {
            self.pos += 1;
        }
        (self.pos > start).then(|| &self.s[start..self.pos])
    }

    /// The digits of strtol/strtoul in `radix`: (negative, magnitude
    /// saturated above u64::MAX).
    fn digits(&mut self, radix: u32) -> Option<(bool, u128)> {
        self.skip_space();
        let mut neg = false;
        if let Some(&c @ (b'+' | b'-')) = self.s.get(self.pos) {
            neg = c == b'-';
            self.pos += 1;
        }
        let start = self.pos;
        let mut value: u128 = 0;
        while let Some(d) = self
            .s
            .get(self.pos)
            .and_then(|&c| (c as char).to_digit(radix))
        {
            value = (value * radix as u128 + d as u128).min(u64::MAX as u128 + 1);
            self.pos += 1;
        }
        (self.pos > start).then_some((neg, value))
    }

    /// `%o` and `%u`: strtoul, stored in an unsigned int.
    fn unsigned(&mut self, radix: u32) -> Option<u32> {
        let (neg, mag) = self.digits(radix)?;
        let v: u64 = if mag > u64::MAX as u128 {
            u64::MAX
        } else if neg {
            (mag as u64).wrapping_neg()
        } else {
            mag as u64
        };
        Some(v as u32)
    }

    /// `%d`: strtol, stored in an int (read here as its 32 bits).
    fn int(&mut self) -> Option<u32> {
        let (neg, mag) = self.digits(10)?;
        let v: i64 = if neg {
            if mag > 1u128 << 63 {
                i64::MIN
            } else {
                (mag as i128).wrapping_neg() as i64
            }
        } else if mag > i64::MAX as u128 {
            i64::MAX
        } else {
            mag as i64
        };
        Some(v as u32)
    }

    /// ` %c`
    fn char(&mut self) -> Option<u8> {
        self.skip_space();
        let c = *self.s.get(self.pos)?;
        self.pos += 1;
        Some(c)
    }
}

/// `cpio_replace_env`: repeatedly replace the first `${VAR}` (rescanning
/// from the start), truncating to PATH_MAX bytes; unset is empty.
fn replace_env(origin: &Origin, location: &[u8], env: EnvLookup) -> Result<Vec<u8>> {
    let mut s = location.to_vec();
    let mut rounds = 0;
    while let Some((start, len)) = s.windows(2).position(|w| w == b"${").and_then(|start| {
        let len = s[start + 2..].iter().position(|&b| b == b'}')?;
        Some((start, len))
    }) {
        rounds += 1;
        if rounds > 10_000 {
            return Err(Error::at(
                origin.clone(),
                "`${...}` expansion does not end (a variable expands to itself)",
            ));
        }
        let name = String::from_utf8_lossy(&s[start + 2..start + 2 + len]).into_owned();
        let value = env(&name).map(OsString::into_vec).unwrap_or_default();
        let mut next = s[..start].to_vec();
        next.extend_from_slice(&value);
        next.extend_from_slice(&s[start + 2 + len + 1..]);
        next.truncate(PATH_MAX);
        // snprintf stops at a NUL inside a value, as strcpy would.
        if let Some(nul) = next.iter().position(|&b| b == 0) {
            next.truncate(nul);
        }
        s = next;
    }
    Ok(s)
}

fn unrecognized(origin: Origin, kind: &str) -> Error {
    Error::at(
        origin,
        format!("unrecognized {kind} format (gen_init_cpio rejects this line too)"),
    )
}

fn entry(origin: &Origin, name: &[u8], kind: Kind, mode: u32, uid: u32, gid: u32) -> Entry {
    let mut e = Entry::new(ImagePath::compat(name), kind, mode, origin.clone());
    e.uid = uid;
    e.gid = gid;
    e
}

fn handle(kind: &str, args: &[u8], origin: &Origin, env: EnvLookup) -> Result<Entry> {
    let mut sc = Scan { s: args, pos: 0 };
    match kind {
        "file" => {
            let (Some(name), Some(location), Some(mode), Some(uid), Some(gid)) =
                (sc.word(), sc.word(), sc.unsigned(8), sc.int(), sc.int())
            else {
                return Err(unrecognized(origin.clone(), "file"));
            };
            sc.skip_space();
            let mut links = Vec::new();
            if sc.pos < args.len() && is_graph(args[sc.pos]) {
                while let Some(link) = sc.word() {
                    links.push(ImagePath::compat(link));
                    sc.skip_space();
                    if !(sc.pos < args.len() && is_graph(args[sc.pos])) {
                        break;
                    }
                }
            }
            let location = replace_env(origin, location, env)?;
            let source = Source::unresolved(PathBuf::from(OsString::from_vec(location)));
            Ok(entry(
                origin,
                name,
                Kind::File {
                    source: source.into(),
                    links: links.into(),
                },
                mode,
                uid,
                gid,
            ))
        }
        "slink" => {
            let (Some(name), Some(target), Some(mode), Some(uid), Some(gid)) =
                (sc.word(), sc.word(), sc.unsigned(8), sc.int(), sc.int())
            else {
                return Err(unrecognized(origin.clone(), "slink"));
            };
            let target = target.into();
            Ok(entry(
                origin,
                name,
                Kind::Symlink { target },
                mode,
                uid,
                gid,
            ))
        }
        "nod" => {
            let (Some(name), Some(mode), Some(uid), Some(gid), Some(dev), Some(major), Some(minor)) = (
                sc.word(),
                sc.unsigned(8),
                sc.int(),
                sc.int(),
                sc.char(),
                sc.unsigned(10),
                sc.unsigned(10),
            ) else {
                return Err(unrecognized(origin.clone(), "nod"));
            };
            let kind = if dev == b'b' {
                DeviceKind::Block
            } else {
                DeviceKind::Char
            };
            Ok(entry(
                origin,
                name,
                Kind::Node { kind, major, minor },
                mode,
                uid,
                gid,
            ))
        }
        _ => {
            let (Some(name), Some(mode), Some(uid), Some(gid)) =
                (sc.word(), sc.unsigned(8), sc.int(), sc.int())
            else {
                return Err(unrecognized(origin.clone(), kind));
            };
            Ok(entry(origin, name, generic_kind(kind), mode, uid, gid))
        }
    }
}

/// fgets: chunks ending at a newline (kept) or at LINE_SIZE - 1 bytes.
fn chunks(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let max = rest.len().min(LINE_SIZE - 1);
        let end = rest[..max]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(max, |p| p + 1);
        let (chunk, tail) = rest.split_at(end);
        rest = tail;
        Some(chunk)
    })
}

pub(super) fn parse(bytes: &[u8], file: Arc<str>, env: EnvLookup) -> Result<ParsedList> {
    let mut parsed = ParsedList::default();
    let mut first_error: Option<Error> = None;
    let place = Origin::new(file, 1, 1);
    // Positions are reported in the file's own lines, not in fgets chunks:
    // a line longer than one chunk continues in the next chunk.
    let (mut next_line, mut next_base) = (1u32, 0usize);
    for chunk in chunks(bytes) {
        let (number, base) = (next_line, next_base);
        if chunk.last() == Some(&b'\n') {
            (next_line, next_base) = (next_line + 1, 0);
        } else {
            next_base += chunk.len();
        }
        let origin = |column: usize| place.at(number, (base + column) as u32 + 1);
        // C strings end at the first NUL.
        let c = &chunk[..chunk.iter().position(|&b| b == 0).unwrap_or(chunk.len())];
        if c.first() == Some(&b'#') {
            continue;
        }
        let Some(start) = c.iter().position(|&b| b != b' ' && b != b'\t') else {
            first_error.get_or_insert(Error::at(
                origin(0),
                "could not locate the file type (gen_init_cpio stops here)",
            ));
            break;
        };
        let type_end = c[start..]
            .iter()
            .position(|&b| b == b' ' || b == b'\t')
            .map_or(c.len(), |p| start + p);
        if c[start] == b'\n' || (start == 0 && type_end == c.len()) {
            continue; // blank line, or a lone word that strtok takes for one
        }
        let mut a = (type_end + 1).min(c.len());
        while a < c.len() && c[a] == b'\n' {
            a += 1;
        }
        let args = (a < c.len()).then(|| {
            let end = c[a..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(c.len(), |p| a + p);
            &c[a..end]
        });
        let word = &c[start..type_end];
        let known = TYPES.iter().find(|t| start == 0 && t.as_bytes() == word);
        match (known, args) {
            (Some(kind), Some(args)) => match handle(kind, args, &origin(start), env) {
                Ok(e) => parsed.entries.push(e),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            },
            (known, None) => {
                first_error.get_or_insert(Error::at(
                    origin(type_end),
                    "the line ends after its type (gen_init_cpio fails here)",
                ));
                if known.is_none() {
                    continue;
                }
            }
            (None, Some(_)) => parsed.warnings.push(Warning {
                origin: Some(origin(start)),
                message: format!(
                    "unknown file type `{}`; line skipped as gen_init_cpio does",
                    escape(&c[..type_end])
                ),
                details: Vec::new(),
            }),
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(parsed),
    }
}
