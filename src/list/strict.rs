//! The strict reader: gen_init_cpio's grammar, and an error with file,
//! line and column wherever the kernel tool would silently do harm.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::Arc;

use super::syntax::{field_names, generic_kind, EnvLookup, ParsedList, TYPES};
use crate::entry::{DeviceKind, Entry, Kind, Origin, Source, PATH_MAX};
use crate::error::{Error, Result, Warning};
use crate::path::{escape, ImagePath};
use crate::suggest::edit_distance;

/// Blanks between fields: what sscanf skips, except the newline.
fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | 0x0b | 0x0c)
}

struct Line<'a> {
    /// Any position in the file: lines share its place.
    file: &'a Origin,
    number: u32,
    fields: Vec<(u32, &'a [u8])>,
    end_column: u32,
}

impl<'a> Line<'a> {
    fn origin(&self, column: u32) -> Origin {
        self.file.at(self.number, column)
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
    let place = Origin::new(file, 1, 1);
    // For duplicate names: name -> (index of the entry, line).
    let mut seen: HashMap<Vec<u8>, (usize, u32)> = HashMap::new();
    for (idx, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let number = idx as u32 + 1;
        if raw.first() == Some(&b'#') {
            continue;
        }
        let line = Line {
            file: &place,
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
                            escape(&name)
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
                escape(word)
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
                escape(extra),
                wanted.join(" ")
            )
        };
        return Err(Error::at(origin, msg)
            .with_hint("put comments on a line of their own, starting with `#`"));
    }
    let f = |i: usize| line.field(i + 1);
    let (name_origin, raw_name) = f(0);
    let name = ImagePath::list(raw_name, &name_origin)?;
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
                            escape(link)
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
                links.push(ImagePath::list(&link, &origin)?);
            }
            let path = PathBuf::from(OsString::from_vec(location));
            Entry::new(
                name.clone(),
                Kind::File {
                    source: Source::unresolved(path).into(),
                    links: links.into(),
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
                name.clone(),
                Kind::Symlink {
                    target: target.into(),
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
                            escape(dev)
                        ),
                    ))
                }
            };
            let (o, t) = f(5);
            let major = number_u32(&o, t, "major number")?;
            let (o, t) = f(6);
            let minor = number_u32(&o, t, "minor number")?;
            Entry::new(
                name.clone(),
                Kind::Node { kind, major, minor },
                0,
                name_origin.clone(),
            )
        }
        other => Entry::new(name.clone(), generic_kind(other), 0, name_origin.clone()),
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

fn mode(origin: &Origin, text: &[u8]) -> Result<u32> {
    let bad = || {
        Error::at(
            origin.clone(),
            format!("mode `{}` is not an octal number", escape(text)),
        )
        .with_hint("write permissions in octal, e.g. 0755")
    };
    if text.is_empty() || !text.iter().all(|b| (b'0'..=b'7').contains(b)) {
        return Err(bad());
    }
    let value =
        u64::from_str_radix(std::str::from_utf8(text).map_err(|_| bad())?, 8).map_err(|_| bad())?;
    if value > 0o7777 {
        return Err(Error::at(
            origin.clone(),
            format!(
                "mode `{}` has bits beyond 07777; give only the permission bits",
                escape(text)
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
            format!("{what} `{}` is not a decimal number", escape(text)),
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
                let at = origin.at(origin.line, column);
                let value = (!name.is_empty()).then(|| env(name)).flatten();
                let Some(value) = value else {
                    return Err(Error::at(
                        at,
                        format!("environment variable `{}` is not set", escape(var)),
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
                            escape(parent),
                            escape(name)
                        ),
                        details: Vec::new(),
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
