//! Glob patterns, compiled one way for every rule that takes them: tree
//! `include`/`exclude`, segment `paths`, module `patterns` and exclusions,
//! firmware names, and the patterns `inspect` takes on its command line.
//!
//! `*` and `?` stay inside one path component unless the rule says names
//! are not paths ([`Separator::Any`], firmware names); `**` crosses
//! components. With [`Below::Yes`] a pattern also takes everything below
//! what it names (`etc` takes `etc/x`), by the same rules.

use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};

use crate::entry::Origin;
use crate::error::{Error, Result};

/// Whether `*` and `?` may match a `/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Separator {
    /// Paths: they stop at `/`.
    Literal,
    /// Names that are not paths: they match `/` too.
    Any,
}

/// Whether a pattern also takes what is below a directory it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Below {
    Yes,
    No,
}

fn compile(text: &str, sep: Separator) -> std::result::Result<globset::Glob, globset::Error> {
    GlobBuilder::new(text)
        .literal_separator(sep == Separator::Literal)
        .build()
}

fn build(text: &str, sep: Separator, origin: &Origin) -> Result<globset::Glob> {
    compile(text, sep)
        .map_err(|e| Error::at(origin.clone(), format!("bad glob `{text}`: {}", e.kind())))
}

/// Path patterns given on the command line (they have no file and line):
/// one set, None when there are none; a bad one is a usage error.
pub fn command_line(patterns: &[String]) -> Result<Option<GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for text in patterns {
        let g = compile(text, Separator::Literal)
            .map_err(|e| Error::usage(format!("bad glob `{text}`: {}", e.kind())))?;
        b.add(g);
    }
    let set = b
        .build()
        .map_err(|e| Error::usage(format!("bad glob: {e}")))?;
    Ok(Some(set))
}

/// One pattern.
pub fn matcher(text: &str, sep: Separator, origin: &Origin) -> Result<GlobMatcher> {
    Ok(build(text, sep, origin)?.compile_matcher())
}

/// Patterns as one set; None when there are none.
pub fn set(patterns: &[(String, Origin)], sep: Separator, below: Below) -> Result<Option<GlobSet>> {
    Ok(indexed(patterns, sep, below)?.map(|(s, _)| s))
}

/// [`set`], with the pattern (index into `patterns`) each glob of the set
/// comes from, to tell which patterns matched.
pub fn indexed(
    patterns: &[(String, Origin)],
    sep: Separator,
    below: Below,
) -> Result<Option<(GlobSet, Vec<usize>)>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    let mut owner = Vec::new();
    for (i, (text, origin)) in patterns.iter().enumerate() {
        b.add(build(text, sep, origin)?);
        owner.push(i);
        if below == Below::Yes {
            let under = format!("{}/**", text.trim_end_matches('/'));
            b.add(build(&under, sep, origin)?);
            owner.push(i);
        }
    }
    let set = b.build().map_err(|e| {
        let origin = patterns[0].1.clone();
        Error::at(origin, format!("bad glob set: {e}"))
    })?;
    Ok(Some((set, owner)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pats(p: &[&str]) -> Vec<(String, Origin)> {
        p.iter()
            .map(|s| (s.to_string(), Origin::default()))
            .collect()
    }

    #[test]
    fn paths_stop_at_slashes_and_directories_take_their_content() {
        let s = set(&pats(&["etc", "*.ko"]), Separator::Literal, Below::Yes)
            .unwrap()
            .unwrap();
        assert!(s.is_match("etc"));
        assert!(s.is_match("etc/a/b"));
        assert!(s.is_match("x.ko"));
        assert!(s.is_match("x.ko/inside"));
        assert!(!s.is_match("dir/x.ko"));
        let n = set(&pats(&["iwlwifi-*"]), Separator::Any, Below::No)
            .unwrap()
            .unwrap();
        assert!(n.is_match("iwlwifi-a/b"));
        assert!(set(&[], Separator::Any, Below::No).unwrap().is_none());
        assert!(set(&pats(&["a[b"]), Separator::Literal, Below::No).is_err());
        let c = command_line(&["lib/*.so".into()]).unwrap().unwrap();
        assert!(c.is_match("lib/x.so") && !c.is_match("lib/a/x.so"));
        assert!(command_line(&["a[b".into()]).is_err());
        assert!(command_line(&[]).unwrap().is_none());
    }
}
