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

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::Arc;

use crate::entry::{
    display_name, strip_leading_slash, DeviceKind, Entry, Kind, Origin, Source, PATH_MAX,
};
use crate::error::{Error, Result, Warning};

/// How `${VAR}` in a list is looked up.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// The process environment, for [`ListOptions::env`].
pub fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

pub struct ListOptions<'a> {
    /// Read exactly as gen_init_cpio does.
    pub compat: bool,
    pub env: EnvLookup<'a>,
}

impl Default for ListOptions<'_> {
    fn default() -> Self {
        ListOptions {
            compat: false,
            env: &process_env,
        }
    }
}

#[derive(Debug, Default)]
pub struct ParsedList {
    pub entries: Vec<Entry>,
    pub warnings: Vec<Warning>,
}

/// Reads a list file's bytes; `file` names it in messages.
pub fn parse(bytes: &[u8], file: &str, opts: &ListOptions) -> Result<ParsedList> {
    let file: Arc<str> = Arc::from(file);
    if opts.compat {
        compat::parse(bytes, file, opts.env)
    } else {
        strict::parse(bytes, file, opts.env)
    }
}

const TYPES: [&str; 6] = ["file", "dir", "nod", "slink", "pipe", "sock"];

/// The fields each entry type takes after the type word.
fn field_names(kind: &str) -> &'static [&'static str] {
    match kind {
        "file" => &["<name>", "<location>", "<mode>", "<uid>", "<gid>"],
        "dir" | "pipe" | "sock" => &["<name>", "<mode>", "<uid>", "<gid>"],
        "nod" => &[
            "<name>",
            "<mode>",
            "<uid>",
            "<gid>",
            "<dev_type>",
            "<maj>",
            "<min>",
        ],
        "slink" => &["<name>", "<target>", "<mode>", "<uid>", "<gid>"],
        _ => &[],
    }
}

/// The kinds whose lines are just `<name> <mode> <uid> <gid>`.
fn generic_kind(word: &str) -> Kind {
    match word {
        "pipe" => Kind::Pipe,
        "sock" => Kind::Socket,
        _ => Kind::Dir,
    }
}

mod strict {
    use super::*;

    /// Blanks between fields: what sscanf skips, except the newline.
    fn is_blank(b: u8) -> bool {
        matches!(b, b' ' | b'\t' | b'\r' | 0x0b | 0x0c)
    }

    struct Line<'a> {
        file: &'a Arc<str>,
        number: u32,
        fields: Vec<(u32, &'a [u8])>,
        end_column: u32,
    }

    impl<'a> Line<'a> {
        fn origin(&self, column: u32) -> Origin {
            Origin::new(self.file.clone(), self.number, column)
        }

        fn field(&self, i: usize) -> (Origin, &'a [u8]) {
            let (col, text) = self.fields[i];
            (self.origin(col), text)
        }
    }

    fn split_fields(line: &[u8]) -> Vec<(u32, &[u8])> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < line.len() {
            while i < line.len() && is_blank(line[i]) {
                i += 1;
            }
            let start = i;
            while i < line.len() && !is_blank(line[i]) {
                i += 1;
            }
            if i > start {
                out.push((start as u32 + 1, &line[start..i]));
            }
        }
        out
    }

    pub(super) fn parse(bytes: &[u8], file: Arc<str>, env: EnvLookup) -> Result<ParsedList> {
        let mut parsed = ParsedList::default();
        // For duplicate names: name -> (index of the entry, line).
        let mut seen: HashMap<Vec<u8>, (usize, u32)> = HashMap::new();
        for (idx, raw) in bytes.split(|&b| b == b'\n').enumerate() {
            let number = idx as u32 + 1;
            if raw.first() == Some(&b'#') {
                continue;
            }
            let line = Line {
                file: &file,
                number,
                fields: split_fields(raw),
                end_column: raw.len() as u32 + 1,
            };
            let Some(&(col, word)) = line.fields.first() else {
                continue;
            };
            if let Some(pos) = raw.iter().position(|&b| b == 0) {
                return Err(
                    Error::at(line.origin(pos as u32 + 1), "NUL byte in the list")
                        .with_hint("list files are text; names cannot contain NUL"),
                );
            }
            if col != 1 {
                let err = if word.starts_with(b"#") {
                    Error::at(
                        line.origin(col),
                        "indented comment: only a `#` in the first column starts a comment; \
                         gen_init_cpio reads this line as an unknown entry type and skips it",
                    )
                    .with_hint("move the `#` to the first column")
                } else {
                    Error::at(
                        line.origin(1),
                        "indented line: gen_init_cpio does not recognise an entry type after \
                         leading blanks and skips the whole line",
                    )
                    .with_hint(
                        "remove the leading blanks, or pass --compat to skip the line as \
                         gen_init_cpio does",
                    )
                };
                return Err(err);
            }
            let entry = parse_line(&line, word, env)?;
            let names: Vec<Vec<u8>> = entry.names().map(<[u8]>::to_vec).collect();
            parsed.entries.push(entry);
            let index = parsed.entries.len() - 1;
            for name in names {
                if let Some(&(first, first_line)) = seen.get(&name) {
                    let (a, b) = (&parsed.entries[first], &parsed.entries[index]);
                    let same_dir = a.kind == Kind::Dir
                        && b.kind == Kind::Dir
                        && (a.mode, a.uid, a.gid) == (b.mode, b.uid, b.gid);
                    if !same_dir {
                        return Err(Error::at(
                            b.origin.clone(),
                            format!(
                                "`{}` is already in the archive (line {first_line})",
                                display_name(&name)
                            ),
                        )
                        .with_hint("each name may appear once; remove one of the two lines"));
                    }
                } else {
                    seen.insert(name, (index, number));
                }
            }
        }
        warn_missing_parents(&mut parsed);
        Ok(parsed)
    }

    fn parse_line(line: &Line, word: &[u8], env: EnvLookup) -> Result<Entry> {
        let (type_origin, _) = line.field(0);
        let Some(kind_word) = TYPES.iter().find(|t| t.as_bytes() == word) else {
            let mut err = Error::at(
                type_origin,
                format!(
                    "unknown entry type `{}`; gen_init_cpio would skip this line",
                    display_name(word)
                ),
            );
            let guess = std::str::from_utf8(word)
                .ok()
                .and_then(|w| TYPES.iter().min_by_key(|t| edit_distance(w, t)).copied())
                .filter(|t| edit_distance(&String::from_utf8_lossy(word), t) <= 2);
            err = match guess {
                Some(t) => err.with_hint(format!("did you mean `{t}`?")),
                None => err.with_hint(format!("the types are: {}", TYPES.join(", "))),
            };
            return Err(err);
        };
        let wanted = field_names(kind_word);
        let have = line.fields.len() - 1;
        if have < wanted.len() {
            return Err(Error::at(
                line.origin(line.end_column),
                format!(
                    "missing {} (a `{kind_word}` line is: {kind_word} {})",
                    wanted[have],
                    wanted.join(" ")
                ),
            ));
        }
        if *kind_word != "file" && have > wanted.len() {
            let (origin, extra) = line.field(wanted.len() + 1);
            let msg = if extra.starts_with(b"#") {
                "a `#` after the fields is not a comment; gen_init_cpio ignores the rest of this line"
                    .to_string()
            } else {
                format!(
                    "unexpected field `{}` (a `{kind_word}` line is: {kind_word} {})",
                    display_name(extra),
                    wanted.join(" ")
                )
            };
            return Err(Error::at(origin, msg)
                .with_hint("put comments on a line of their own, starting with `#`"));
        }
        let f = |i: usize| line.field(i + 1);
        let (name_origin, raw_name) = f(0);
        let name = check_name(&name_origin, raw_name)?;
        let mut entry = match *kind_word {
            "file" => {
                let (loc_origin, location) = f(1);
                let location = expand_strict(&loc_origin, location, env)?;
                let mut links = Vec::new();
                for i in wanted.len()..have {
                    let (origin, link) = f(i);
                    if link.starts_with(b"#") {
                        return Err(Error::at(
                            origin,
                            format!(
                                "`{}` is not a comment here: gen_init_cpio would create \
                                 hardlinks named after each word that follows the gid",
                                display_name(link)
                            ),
                        )
                        .with_hint(
                            "put comments on a line of their own, starting with `#`; \
                             --compat accepts the line as gen_init_cpio does",
                        ));
                    }
                    if link.first().is_some_and(|&b| b >= 0x80) {
                        return Err(Error::at(
                            origin,
                            "gen_init_cpio drops a hardlink name that starts with a non-ASCII \
                             byte, and every name after it",
                        )
                        .with_hint("start the name with `/`, or pass --compat to drop it as gen_init_cpio does"));
                    }
                    let link = expand_strict(&origin, link, env)?;
                    links.push(check_name(&origin, &link)?.to_vec());
                }
                let path = PathBuf::from(OsString::from_vec(location));
                Entry::new(
                    name.to_vec(),
                    Kind::File {
                        source: Source::unresolved(path),
                        links,
                    },
                    0,
                    name_origin.clone(),
                )
            }
            "slink" => {
                let (target_origin, target) = f(1);
                if target.len() + 1 > PATH_MAX {
                    return Err(Error::at(
                        target_origin,
                        format!(
                            "symlink target of {} bytes; the kernel skips symlinks whose \
                             target is longer than {} bytes",
                            target.len(),
                            PATH_MAX - 1
                        ),
                    ));
                }
                Entry::new(
                    name.to_vec(),
                    Kind::Symlink {
                        target: target.to_vec(),
                    },
                    0,
                    name_origin.clone(),
                )
            }
            "nod" => {
                let (dev_origin, dev) = f(4);
                let kind = match dev {
                    b"b" => DeviceKind::Block,
                    b"c" => DeviceKind::Char,
                    _ => {
                        return Err(Error::at(
                            dev_origin,
                            format!(
                                "device type `{}` is neither `b` (block) nor `c` (character)",
                                display_name(dev)
                            ),
                        ))
                    }
                };
                let (o, t) = f(5);
                let major = number_u32(&o, t, "major number")?;
                let (o, t) = f(6);
                let minor = number_u32(&o, t, "minor number")?;
                Entry::new(
                    name.to_vec(),
                    Kind::Node { kind, major, minor },
                    0,
                    name_origin.clone(),
                )
            }
            other => Entry::new(name.to_vec(), generic_kind(other), 0, name_origin.clone()),
        };
        let mode_at = wanted.iter().position(|w| *w == "<mode>").unwrap_or(1);
        let (o, t) = f(mode_at);
        entry.mode = mode(&o, t)?;
        let (o, t) = f(mode_at + 1);
        entry.uid = id(&o, t, "uid")?;
        let (o, t) = f(mode_at + 2);
        entry.gid = id(&o, t, "gid")?;
        entry.origin = line.origin(1);
        Ok(entry)
    }

    fn check_name<'n>(origin: &Origin, raw: &'n [u8]) -> Result<&'n [u8]> {
        let name = strip_leading_slash(raw);
        if name.is_empty() {
            return Err(Error::at(origin.clone(), "empty name")
                .with_hint("name the entry inside the archive, e.g. /bin"));
        }
        if name.len() + 1 > PATH_MAX {
            return Err(Error::at(
                origin.clone(),
                format!(
                    "name of {} bytes; the kernel skips entries whose name is longer than {} bytes",
                    name.len(),
                    PATH_MAX - 1
                ),
            ));
        }
        if name.split(|&b| b == b'/').any(|c| c == b"..") {
            return Err(Error::at(
                origin.clone(),
                format!("`{}` contains a `..` component", display_name(raw)),
            )
            .with_hint("archive names must stay inside the image's root"));
        }
        Ok(name)
    }

    fn mode(origin: &Origin, text: &[u8]) -> Result<u32> {
        let bad = || {
            Error::at(
                origin.clone(),
                format!("mode `{}` is not an octal number", display_name(text)),
            )
            .with_hint("write permissions in octal, e.g. 0755")
        };
        if text.is_empty() || !text.iter().all(|b| (b'0'..=b'7').contains(b)) {
            return Err(bad());
        }
        let value = u64::from_str_radix(std::str::from_utf8(text).map_err(|_| bad())?, 8)
            .map_err(|_| bad())?;
        if value > 0o7777 {
            return Err(Error::at(
                origin.clone(),
                format!(
                    "mode `{}` has bits beyond 07777; give only the permission bits",
                    display_name(text)
                ),
            )
            .with_hint("the entry type sets the file type bits"));
        }
        Ok(value as u32)
    }

    fn id(origin: &Origin, text: &[u8], what: &str) -> Result<u32> {
        if text == b"-1" {
            return Ok(u32::MAX);
        }
        number_u32(origin, text, what)
    }

    fn number_u32(origin: &Origin, text: &[u8], what: &str) -> Result<u32> {
        let s = std::str::from_utf8(text).unwrap_or("");
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::at(
                origin.clone(),
                format!("{what} `{}` is not a decimal number", display_name(text)),
            ));
        }
        s.parse::<u32>().map_err(|_| {
            Error::at(
                origin.clone(),
                format!("{what} {s} is out of range (0 to {})", u32::MAX),
            )
        })
    }

    /// `${VAR}` expansion, left to right, once; an unset variable is an error.
    fn expand_strict(origin: &Origin, text: &[u8], env: EnvLookup) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(text.len());
        let mut i = 0;
        while i < text.len() {
            if text[i..].starts_with(b"${") {
                if let Some(len) = text[i + 2..].iter().position(|&b| b == b'}') {
                    let var = &text[i + 2..i + 2 + len];
                    let name = std::str::from_utf8(var).unwrap_or("");
                    let column = origin.column + i as u32;
                    let at = Origin::new(origin.file.clone(), origin.line, column);
                    let value = (!name.is_empty()).then(|| env(name)).flatten();
                    let Some(value) = value else {
                        return Err(Error::at(
                            at,
                            format!("environment variable `{}` is not set", display_name(var)),
                        )
                        .with_hint(
                            "set it, or pass --compat to expand it to nothing as gen_init_cpio does",
                        ));
                    };
                    out.extend_from_slice(value.as_bytes());
                    i += 2 + len + 1;
                    continue;
                }
            }
            out.push(text[i]);
            i += 1;
        }
        Ok(out)
    }

    fn warn_missing_parents(parsed: &mut ParsedList) {
        let mut dirs: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
        let mut warnings = Vec::new();
        for e in &parsed.entries {
            for name in e.names() {
                if let Some(cut) = name.iter().rposition(|&b| b == b'/') {
                    let parent = &name[..cut];
                    if !parent.is_empty() && !dirs.contains(parent) {
                        warnings.push(Warning {
                            origin: Some(e.origin.clone()),
                            message: format!(
                                "the directory `{}` is not listed before `{}`; the kernel \
                                 drops entries whose parent is missing",
                                display_name(parent),
                                display_name(name)
                            ),
                        });
                        // Say it once per directory.
                        dirs.insert(parent);
                    }
                }
            }
            if e.kind == Kind::Dir {
                dirs.insert(&e.name);
            }
        }
        parsed.warnings.extend(warnings);
    }
}

/// Levenshtein distance, for "did you mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

mod compat {
    //! The kernel tool's parsing, reproduced: lines are fgets chunks of at
    //! most LINE_SIZE - 1 bytes, the type is the first strtok token, and the
    //! fields are read with sscanf's conversions (%4096s, %o, %d, %c, %u).
    use super::*;

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
            while self.pos < self.s.len()
                && !is_space(self.s[self.pos])
                && self.pos - start < PATH_MAX
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
        let mut e = Entry::new(
            strip_leading_slash(name).to_vec(),
            kind,
            mode,
            origin.clone(),
        );
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
                        links.push(strip_leading_slash(link).to_vec());
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
                    Kind::File { source, links },
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
                let target = target.to_vec();
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
                let (
                    Some(name),
                    Some(mode),
                    Some(uid),
                    Some(gid),
                    Some(dev),
                    Some(major),
                    Some(minor),
                ) = (
                    sc.word(),
                    sc.unsigned(8),
                    sc.int(),
                    sc.int(),
                    sc.char(),
                    sc.unsigned(10),
                    sc.unsigned(10),
                )
                else {
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
            let origin =
                |column: usize| Origin::new(file.clone(), number, (base + column) as u32 + 1);
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
                        display_name(&c[..type_end])
                    ),
                }),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(parsed),
        }
    }
}

/// Bytes the list format cannot carry inside a field.
fn unlistable(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | 0)
}

fn list_field<'f>(entry: &Entry, what: &str, field: &'f [u8]) -> Result<&'f [u8]> {
    if let Some(i) = field.iter().position(|&b| unlistable(b)) {
        return Err(Error::at(
            entry.origin.clone(),
            format!(
                "{what} `{}` has {} at byte {i}, which a gen_init_cpio list cannot express",
                display_name(field),
                match field[i] {
                    b' ' => "a space",
                    b'\t' => "a tab",
                    0 => "a NUL",
                    _ => "a line break or blank",
                }
            ),
        )
        .with_hint("rename it, or build the manifest directly instead of through a list"));
    }
    if field.windows(2).any(|w| w == b"${") {
        return Err(Error::at(
            entry.origin.clone(),
            format!(
                "{what} `{}` contains `${{`, which a list would expand",
                display_name(field)
            ),
        ));
    }
    Ok(field)
}

/// Writes entries as a gen_init_cpio list that reads back to the same
/// entries (`composer build --list` and the kernel tool alike). Names and
/// sources a list cannot express are an error naming the entry's origin.
pub fn write_list(entries: &[Entry]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for e in entries {
        let name = list_field(e, "name", &e.name)?;
        out.extend_from_slice(e.kind.keyword().as_bytes());
        out.extend_from_slice(b" /");
        out.extend_from_slice(name);
        let owner = format!(" {:04o} {} {}", e.mode, e.uid, e.gid);
        match &e.kind {
            Kind::File { source, links } => {
                out.push(b' ');
                out.extend_from_slice(list_field(e, "source", source.path.as_os_str().as_bytes())?);
                out.extend_from_slice(owner.as_bytes());
                for l in links {
                    // The leading `/` also keeps a `#` or a non-ASCII first
                    // byte from ending the hardlink names in gen_init_cpio.
                    let l = list_field(e, "hardlink name", l)?;
                    out.extend_from_slice(b" /");
                    out.extend_from_slice(l);
                }
            }
            Kind::Symlink { target } => {
                out.push(b' ');
                out.extend_from_slice(list_field(e, "symlink target", target)?);
                out.extend_from_slice(owner.as_bytes());
            }
            Kind::Node { kind, major, minor } => {
                out.extend_from_slice(owner.as_bytes());
                let t = if *kind == DeviceKind::Block { 'b' } else { 'c' };
                out.extend_from_slice(format!(" {t} {major} {minor}").as_bytes());
            }
            Kind::Dir | Kind::Pipe | Kind::Socket => out.extend_from_slice(owner.as_bytes()),
        }
        out.push(b'\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
                assert_eq!(links, &[b"sbin/init".to_vec(), b"linuxrc".to_vec()]);
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
            Kind::File { links, .. } => assert_eq!(links, &[b"#".to_vec(), b"note".to_vec()]),
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
