//! `[[segment]]` rules: which segment each entry goes to.
//!
//! Documents that name the same segment configure one segment (a later
//! setting wins, patterns add up). An entry goes to the first segment whose
//! `paths` match its name, the rest to the main one; each segment also
//! gets a copy of every directory its entries are under, so that it
//! extracts on its own. The early segment comes before every compressed
//! one: the kernel's early loaders scan uncompressed archives from the
//! start of the image only.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::GlobSet;

use crate::compress::Compression;
use crate::entry::{Entry, Kind, Origin};
use crate::error::{Error, Result, Warning};
use crate::glob::{self, Below, Separator};
use crate::manifest::load::{expand, Loaded};
use crate::path::ancestors;
use crate::spec::{SegmentSpec, EARLY, MAIN};

/// The smallest `chunk_size` a segment may ask for.
const MIN_CHUNK: u64 = 4096;

/// The most encoder threads a segment may ask for.
const MAX_THREADS: u32 = 256;

/// One segment's settings and the names it takes.
struct Rule {
    spec: SegmentSpec,
    /// The `paths` as written (without a leading `/`).
    patterns: Vec<(String, Origin)>,
    matcher: Option<GlobSet>,
    /// The pattern each glob of `matcher` comes from.
    owner: Vec<usize>,
    /// Patterns may match nothing.
    optional: bool,
}

/// Every segment the documents configure, in image order.
pub(super) struct Rules {
    rules: Vec<Rule>,
    /// The segment that takes unassigned entries.
    main: usize,
    /// The segment `[early]`'s files go to.
    early: Option<usize>,
}

/// A segment as the documents describe it, merged by name.
struct Draft {
    name: Option<String>,
    compression: Option<Compression>,
    level: Option<(i32, Origin)>,
    threads: Option<u32>,
    chunk: Option<(u64, Origin)>,
    paths: Vec<(String, Origin)>,
    optional: bool,
    origin: Origin,
}

impl Rules {
    /// One uncompressed segment: a plain archive.
    fn plain() -> Rules {
        Rules {
            rules: vec![Rule {
                spec: SegmentSpec::new(MAIN, Compression::None),
                patterns: Vec::new(),
                matcher: None,
                owner: Vec::new(),
                optional: false,
            }],
            main: 0,
            early: None,
        }
    }

    /// The `[[segment]]` rules of the loaded documents.
    pub(super) fn read(loaded: &Loaded, warnings: &mut Vec<Warning>) -> Result<Rules> {
        let mut drafts: Vec<Draft> = Vec::new();
        for doc in &loaded.docs {
            for rule in &doc.manifest.segment {
                let r = &rule.value;
                let origin = doc.origin(rule.pos);
                let name = match &r.name {
                    Some(n) => {
                        let s = expand(n, n.pos, doc, &loaded.vars)?;
                        if s.is_empty() {
                            return Err(Error::at(doc.origin(n.pos), "a segment name is empty"));
                        }
                        Some(s)
                    }
                    None => None,
                };
                let mut paths = Vec::new();
                for p in &r.paths {
                    let text = expand(p, p.pos, doc, &loaded.vars)?;
                    paths.push((text.trim_start_matches('/').to_string(), doc.origin(p.pos)));
                }
                let level = r.level.as_ref().map(|l| (l.value, doc.origin(l.pos)));
                if let Some(t) = &r.threads {
                    if t.value > MAX_THREADS {
                        return Err(Error::at(
                            doc.origin(t.pos),
                            format!(
                                "{} compression threads; composer starts at most {MAX_THREADS}",
                                t.value
                            ),
                        )
                        .with_hint("leave `threads` out (or 0) for one per CPU"));
                    }
                }
                let threads = r.threads.as_ref().map(|t| t.value);
                let chunk = r.chunk_size.as_ref().map(|c| (c.value, doc.origin(c.pos)));
                let compression = r.compression.as_ref().map(|c| c.value);
                if let Some(c) = &r.compression {
                    if !c.value.can_encode() {
                        return Err(Error::at(
                            doc.origin(c.pos),
                            format!("composer cannot write {} streams", c.value),
                        )
                        .with_hint("choose none, gzip, zstd, xz, lzma, bzip2 or lz4"));
                    }
                }
                let same = name
                    .as_ref()
                    .and_then(|n| drafts.iter().position(|d| d.name.as_ref() == Some(n)));
                match same {
                    Some(i) => {
                        let d = &mut drafts[i];
                        // Another method drops the earlier document's level:
                        // it was that method's.
                        if compression.is_some_and(|c| Some(c) != d.compression) {
                            d.level = None;
                        }
                        d.compression = compression.or(d.compression);
                        d.level = level.or(d.level.take());
                        d.threads = threads.or(d.threads);
                        d.chunk = chunk.or(d.chunk.take());
                        d.paths.extend(paths);
                        d.optional = r.optional.unwrap_or(d.optional);
                    }
                    None => drafts.push(Draft {
                        name,
                        compression,
                        level,
                        threads,
                        chunk,
                        paths,
                        optional: r.optional.unwrap_or(false),
                        origin,
                    }),
                }
            }
        }
        if drafts.is_empty() {
            return Ok(Rules::plain());
        }
        let mut out = Rules {
            rules: Vec::new(),
            main: 0,
            early: None,
        };
        let named_main = drafts.iter().any(|d| d.name.as_deref() == Some(MAIN));
        let count = drafts.len();
        for (i, d) in drafts.into_iter().enumerate() {
            let compression = d.compression.unwrap_or(Compression::None);
            let name = match d.name {
                Some(n) => n,
                None if i + 1 == count && !named_main => MAIN.to_string(),
                None => format!("segment {}", i + 1),
            };
            if let Some((level, origin)) = &d.level {
                match compression.levels() {
                    None => {
                        return Err(Error::at(
                            origin.clone(),
                            format!("segment `{name}`: {compression} has no levels"),
                        )
                        .with_hint("leave `level` out for none and lz4"))
                    }
                    Some((range, _)) if !range.contains(level) => {
                        return Err(Error::at(
                            origin.clone(),
                            format!(
                                "segment `{name}`: {compression} level {level} is out of range ({}..={})",
                                range.start(),
                                range.end()
                            ),
                        ))
                    }
                    Some(_) => {}
                }
            }
            let is_main = name == MAIN || (i + 1 == count && !named_main);
            if is_main && !d.paths.is_empty() {
                return Err(Error::at(
                    d.paths[0].1.clone(),
                    format!(
                        "segment `{name}` is the main segment: it takes every entry no other \
                         segment takes, so it has no `paths`"
                    ),
                )
                .with_hint(
                    "move the patterns to a segment before it, or add a segment after it \
                     (or one named \"main\") to be the main one",
                ));
            }
            if !is_main && d.paths.is_empty() && name != EARLY {
                warnings.push(Warning {
                    origin: Some(d.origin.clone()),
                    message: format!(
                        "segment `{name}` has no `paths` and is not the main segment: it stays empty"
                    ),
                    details: Vec::new(),
                });
            }
            if let Some((chunk, origin)) = &d.chunk {
                if compression == Compression::None && *chunk > 0 {
                    return Err(Error::at(
                        origin.clone(),
                        format!("segment `{name}` is not compressed; `chunk_size` cuts compressed streams"),
                    )
                    .with_hint("leave `chunk_size` out, or give the segment a compression"));
                }
                if *chunk > 0 && *chunk < MIN_CHUNK {
                    return Err(Error::at(
                        origin.clone(),
                        format!("segment `{name}`: chunk_size {chunk} is below {MIN_CHUNK} bytes"),
                    )
                    .with_hint("pieces that small compress badly; 0 writes one stream"));
                }
            }
            let mut spec = SegmentSpec::new(&name, compression);
            spec.level = d.level.map(|(l, _)| l);
            spec.threads = d.threads.unwrap_or(0);
            if let Some((chunk, _)) = d.chunk {
                spec.chunk = chunk;
            }
            out.rules.push(Rule {
                spec,
                matcher: glob::set(&d.paths, Separator::Literal, Below::Yes)?,
                owner: Vec::new(),
                optional: d.optional,
                patterns: d.paths,
            });
            if is_main {
                out.main = i;
            }
        }
        Ok(out)
    }

    /// Makes room for `[early]`'s files (declared at `origin`): the segment
    /// named "early", or a new uncompressed first one.
    pub(super) fn take_early(&mut self, origin: &Origin) -> Result<()> {
        let at = match self.rules.iter().position(|r| r.spec.name == EARLY) {
            Some(i) => i,
            None => {
                self.rules.insert(
                    0,
                    Rule {
                        spec: SegmentSpec::new(EARLY, Compression::None),
                        patterns: Vec::new(),
                        matcher: None,
                        owner: Vec::new(),
                        optional: false,
                    },
                );
                self.main += 1;
                0
            }
        };
        let spec = &self.rules[at].spec;
        if spec.compression != Compression::None {
            return Err(Error::at(
                origin.clone(),
                format!(
                    "the early segment is compressed ({}): the kernel's microcode and ACPI \
                     loaders read only uncompressed archives",
                    spec.compression
                ),
            )
            .with_hint("set compression = \"none\" on the segment named \"early\""));
        }
        if let Some(c) = self.rules[..at]
            .iter()
            .find(|r| r.spec.compression != Compression::None)
        {
            return Err(Error::at(
                origin.clone(),
                format!(
                    "segment `{}` is compressed and comes before the early segment: the \
                     kernel's early loaders stop at the first compressed archive",
                    c.spec.name
                ),
            )
            .with_hint("declare the segment named \"early\" first"));
        }
        self.early = Some(at);
        Ok(())
    }

    /// The segment each entry goes to: the first whose `paths` match its
    /// name, else the main one. A directory no pattern matches goes only
    /// where its content goes (`None`), or to the main segment when nothing
    /// is below it.
    fn assign(&self, entries: &[Entry], matched: &mut [Vec<bool>]) -> Vec<Option<usize>> {
        let mut nonempty: HashSet<&[u8]> = HashSet::new();
        for e in entries {
            for name in e.names() {
                for dir in ancestors(name) {
                    if !nonempty.insert(dir) {
                        break;
                    }
                }
            }
        }
        entries
            .iter()
            .map(|e| {
                let path = Path::new(OsStr::from_bytes(&e.name));
                let mut first = None;
                for (k, r) in self.rules.iter().enumerate() {
                    let Some(m) = &r.matcher else { continue };
                    let hits = m.matches(path);
                    if hits.is_empty() {
                        continue;
                    }
                    first.get_or_insert(k);
                    for h in hits {
                        matched[k][r.owner[h]] = true;
                    }
                }
                match first {
                    Some(k) => Some(k),
                    None if e.kind == Kind::Dir && nonempty.contains(e.name.as_bytes()) => None,
                    None => Some(self.main),
                }
            })
            .collect()
    }

    /// The segments the image will have, with their entries in the order of
    /// `entries` (the early segment's own files first): those that have
    /// entries, and the main one always.
    ///
    /// A pattern also takes what it names through the image's directory
    /// symlinks (`merged`: `lib/firmware/*.xz` is `usr/lib/firmware/*.xz`
    /// with merged /usr); one that takes nothing is a warning.
    pub(super) fn split(
        mut self,
        entries: Vec<Entry>,
        early: Vec<Entry>,
        merged: &dyn Fn(&str) -> String,
        warnings: &mut Vec<Warning>,
    ) -> Result<Vec<SegmentSpec>> {
        if self.rules.len() == 1 && early.is_empty() {
            let mut only = self.rules.into_iter().next().expect("one rule").spec;
            only.entries = entries;
            return Ok(vec![only]);
        }
        for r in &mut self.rules {
            let mut all: Vec<(String, Origin)> = Vec::new();
            let mut of: Vec<usize> = Vec::new();
            for (i, (p, o)) in r.patterns.iter().enumerate() {
                for text in [p.clone(), merged(p)] {
                    if !all.iter().zip(&of).any(|((t, _), j)| *t == text && *j == i) {
                        all.push((text, o.clone()));
                        of.push(i);
                    }
                }
            }
            if let Some((set, owner)) = glob::indexed(&all, Separator::Literal, Below::Yes)? {
                r.owner = owner.into_iter().map(|g| of[g]).collect();
                r.matcher = Some(set);
            }
        }
        let mut matched: Vec<Vec<bool>> = self
            .rules
            .iter()
            .map(|r| vec![false; r.patterns.len()])
            .collect();
        let assigned = self.assign(&entries, &mut matched);
        for (r, m) in self.rules.iter().zip(&matched).filter(|(r, _)| !r.optional) {
            for ((p, o), hit) in r.patterns.iter().zip(m) {
                if !hit {
                    warnings.push(Warning {
                        origin: Some(o.clone()),
                        message: format!(
                            "segment `{}`: `/{p}` matches nothing in the image (as written, or \
                             through the image's directory symlinks)",
                            r.spec.name
                        ),
                        details: Vec::new(),
                    });
                }
            }
        }
        let dirs: HashMap<&[u8], usize> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.kind == Kind::Dir)
            .map(|(i, e)| (e.name.as_bytes(), i))
            .collect();
        let mut wanted = vec![vec![false; entries.len()]; self.rules.len()];
        for (i, e) in entries.iter().enumerate() {
            let Some(k) = assigned[i] else {
                continue;
            };
            let w = &mut wanted[k];
            w[i] = true;
            for name in e.names() {
                for dir in ancestors(name) {
                    match dirs.get(dir) {
                        Some(&d) if w[d] => break,
                        Some(&d) => w[d] = true,
                        None => {}
                    }
                }
            }
        }
        let early_dirs: HashSet<Vec<u8>> = early
            .iter()
            .filter(|e| e.kind == Kind::Dir)
            .map(|e| e.name.to_vec())
            .collect();
        let mut early = Some(early);
        let main = self.main;
        Ok(self
            .rules
            .into_iter()
            .zip(wanted)
            .enumerate()
            .filter_map(|(k, (rule, w))| {
                let mut spec = rule.spec;
                let is_early = self.early == Some(k);
                if is_early {
                    spec.entries = early.take().unwrap_or_default();
                    spec.early = spec.entries.len();
                }
                spec.entries.extend(
                    entries
                        .iter()
                        .zip(&w)
                        .filter(|(e, &want)| {
                            want && !(is_early
                                && e.kind == Kind::Dir
                                && early_dirs.contains(e.name.as_bytes()))
                        })
                        .map(|(e, _)| e.clone()),
                );
                (k == main || !spec.entries.is_empty()).then_some(spec)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Source;
    use crate::path::ImagePath;
    use std::path::PathBuf;

    fn e(name: &str, kind: Kind) -> Entry {
        Entry::new(ImagePath::generated(name), kind, 0o644, Origin::default())
    }

    fn file(name: &str) -> Entry {
        e(
            name,
            Kind::File {
                source: Source::unresolved(PathBuf::from("/x")).into(),
                links: crate::entry::Links::default(),
            },
        )
    }

    fn rules(patterns: &[&str]) -> Rules {
        let first = Rule {
            patterns: patterns
                .iter()
                .map(|p| (p.trim_start_matches('/').to_string(), Origin::default()))
                .collect(),
            matcher: None,
            owner: Vec::new(),
            optional: false,
            spec: SegmentSpec::new("firmware", Compression::None),
        };
        Rules {
            rules: vec![
                first,
                Rule {
                    spec: SegmentSpec::new(MAIN, Compression::Zstd),
                    patterns: Vec::new(),
                    matcher: None,
                    owner: Vec::new(),
                    optional: false,
                },
            ],
            main: 1,
            early: None,
        }
    }

    fn names(s: &SegmentSpec) -> Vec<String> {
        s.entries.iter().map(|e| e.name.to_string()).collect()
    }

    #[test]
    fn entries_go_to_the_first_match_with_their_parents() {
        let entries = vec![
            e("lib", Kind::Dir),
            e("lib/firmware", Kind::Dir),
            file("lib/firmware/a.bin.xz"),
            file("lib/firmware/b.bin"),
            e("usr", Kind::Dir),
            file("usr/x.ko.zst"),
        ];
        let parts = rules(&["/lib/firmware/*.xz", "**/*.ko.zst"])
            .split(entries, vec![], &|p| p.to_string(), &mut Vec::new())
            .unwrap();
        assert_eq!(
            names(&parts[0]),
            [
                "lib",
                "lib/firmware",
                "lib/firmware/a.bin.xz",
                "usr",
                "usr/x.ko.zst"
            ]
        );
        assert_eq!(
            names(&parts[1]),
            ["lib", "lib/firmware", "lib/firmware/b.bin"]
        );
    }

    #[test]
    fn empty_directories_go_to_the_main_segment() {
        let entries = vec![
            e("a", Kind::Dir),
            e("a/b", Kind::Dir),
            e("etc", Kind::Dir),
            file("etc/x.xz"),
        ];
        let parts = rules(&["**/*.xz"])
            .split(entries, vec![], &|p| p.to_string(), &mut Vec::new())
            .unwrap();
        assert_eq!(names(&parts[0]), ["etc", "etc/x.xz"]);
        assert_eq!(names(&parts[1]), ["a", "a/b"]);
    }

    #[test]
    fn a_directory_pattern_takes_what_is_below() {
        let entries = vec![e("etc", Kind::Dir), file("etc/a"), file("b")];
        let parts = rules(&["etc"])
            .split(entries, vec![], &|p| p.to_string(), &mut Vec::new())
            .unwrap();
        assert_eq!(names(&parts[0]), ["etc", "etc/a"]);
        assert_eq!(names(&parts[1]), ["b"]);
    }
}
