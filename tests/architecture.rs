//! The shape of src/: no file imports a file that imports it back, and only the
//! binary (main.rs and the commands) prints.
//!
//! Imports are read from the source text: `use` trees and paths in code that start
//! with `crate`, `super`, `self`, `composer` (the library, from the binary) or the name
//! of a child module, resolved to the file that defines the deepest module they name.
//! Comments and string literals are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Which crate a file belongs to and its module path in it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Module {
    bin: bool,
    path: Vec<String>,
}

#[derive(Debug, PartialEq, Eq, Clone)]
enum Tok {
    Ident(String),
    Colons,
    Open,
    Close,
    Semi,
    Comma,
    Star,
    Other,
}

/// Tokens of Rust source without comments, strings and char literals.
fn tokens(text: &str) -> Vec<Tok> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 1;
            i += 2;
            while i < b.len() && depth > 0 {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                } else {
                    i += 1;
                }
            }
        } else if c == b'r'
            && matches!(b.get(i + 1), Some(b'"' | b'#'))
            && raw_string(b, i).is_some()
        {
            i = raw_string(b, i).unwrap();
            out.push(Tok::Other);
        } else if c == b'b' && b.get(i + 1) == Some(&b'r') && raw_string(b, i + 1).is_some() {
            i = raw_string(b, i + 1).unwrap();
            out.push(Tok::Other);
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push(Tok::Other);
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
            } else {
                // A multi-byte UTF-8 char literal, or a lifetime.
                let rest = &text[i + 1..];
                match rest.chars().next() {
                    Some(ch) if rest[ch.len_utf8()..].starts_with('\'') => {
                        i += 1 + ch.len_utf8() + 1;
                    }
                    _ => {
                        i += 1;
                        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                            i += 1;
                        }
                    }
                }
            }
            out.push(Tok::Other);
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(text[s..i].to_string()));
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push(Tok::Colons);
            i += 2;
        } else {
            out.push(match c {
                b'{' => Tok::Open,
                b'}' => Tok::Close,
                b';' => Tok::Semi,
                b',' => Tok::Comma,
                b'*' => Tok::Star,
                _ => Tok::Other,
            });
            i += 1;
        }
    }
    out
}

/// The end of a raw string starting at `i` (`r"..."`, `r#"..."#`), if it is one.
fn raw_string(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    let mut hashes = 0;
    while b.get(j) == Some(&b'#') {
        hashes += 1;
        j += 1;
    }
    if b.get(j) != Some(&b'"') {
        return None;
    }
    j += 1;
    loop {
        if j >= b.len() {
            return Some(j);
        }
        if b[j] == b'"'
            && b[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&h| h == b'#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
}

/// Every file of src/ with its module.
fn files() -> BTreeMap<PathBuf, Module> {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(src()) {
        let e = e.unwrap();
        let p = e.path();
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let rel = p.strip_prefix(src()).unwrap();
        let mut parts: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        let last = parts.pop().unwrap();
        let stem = last.trim_end_matches(".rs").to_string();
        let bin = parts.first().is_some_and(|c| c == "commands") || stem == "main";
        if !matches!(stem.as_str(), "mod" | "lib" | "main") {
            parts.push(stem);
        }
        out.insert(p.to_path_buf(), Module { bin, path: parts });
    }
    out
}

/// The file defining `m`, or the nearest ancestor module that has a file.
fn file_of(m: &Module, modules: &BTreeMap<Module, PathBuf>) -> Option<PathBuf> {
    let mut path = m.path.clone();
    loop {
        let k = Module {
            bin: m.bin,
            path: path.clone(),
        };
        if let Some(f) = modules.get(&k) {
            return Some(f.clone());
        }
        path.pop()?;
    }
}

/// Module paths (absolute) that a file's tokens name.
fn referenced(toks: &[Tok], me: &Module, children: &BTreeSet<String>) -> Vec<Module> {
    let mut refs = Vec::new();
    // The module each token is in: the file's, plus inline `mod x { ... }` blocks.
    let mut scope: Vec<(Vec<String>, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut current = me.path.clone();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Open => depth += 1,
            Tok::Close => {
                depth = depth.saturating_sub(1);
                if scope.last().is_some_and(|(_, d)| *d == depth) {
                    current = scope.pop().unwrap().0;
                }
            }
            Tok::Ident(k) if k == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Open)) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    scope.push((current.clone(), depth));
                    current.push(name.clone());
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Tok::Ident(k) if k == "use" => {
                let end = toks[i..]
                    .iter()
                    .position(|t| *t == Tok::Semi)
                    .map_or(toks.len(), |p| i + p);
                for path in expand_use(&toks[i + 1..end]) {
                    refs.extend(absolute(&path, me, &current, children));
                }
                i = end;
                continue;
            }
            Tok::Ident(first) => {
                let prev_colons = i > 0 && toks[i - 1] == Tok::Colons;
                if !prev_colons && toks.get(i + 1) == Some(&Tok::Colons) {
                    let mut path = vec![first.clone()];
                    let mut j = i + 1;
                    while toks.get(j) == Some(&Tok::Colons) {
                        match toks.get(j + 1) {
                            Some(Tok::Ident(n)) => {
                                path.push(n.clone());
                                j += 2;
                            }
                            _ => break,
                        }
                    }
                    refs.extend(absolute(&path, me, &current, children));
                    i = j;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    refs
}

/// The paths a `use` tree names (`a::{b, c::{d, *}}` -> a::b, a::c::d, a::c).
fn expand_use(toks: &[Tok]) -> Vec<Vec<String>> {
    fn tree(toks: &[Tok], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        loop {
            match toks.get(*i) {
                Some(Tok::Ident(n)) if n == "as" => {
                    *i += 2;
                }
                Some(Tok::Ident(n)) => {
                    path.push(n.clone());
                    *i += 1;
                }
                Some(Tok::Colons) => *i += 1,
                Some(Tok::Star) => *i += 1,
                Some(Tok::Open) => {
                    *i += 1;
                    loop {
                        tree(toks, i, &path, out);
                        match toks.get(*i) {
                            Some(Tok::Comma) => *i += 1,
                            Some(Tok::Close) => {
                                *i += 1;
                                return;
                            }
                            _ => return,
                        }
                    }
                }
                _ => break,
            }
        }
        let path: Vec<String> = path.into_iter().filter(|p| p != "self").collect();
        out.push(path);
    }
    let mut out = Vec::new();
    let mut i = 0;
    // `pub use`, `pub(crate) use` arrive here without the `use`.
    tree(toks, &mut i, &[], &mut out);
    out
}

/// A path as a module of this crate (or of the library), if it is one.
fn absolute(
    path: &[String],
    me: &Module,
    current: &[String],
    children: &BTreeSet<String>,
) -> Option<Module> {
    let first = path.first()?;
    let (bin, mut base, rest) = match first.as_str() {
        "crate" => (me.bin, Vec::new(), &path[1..]),
        "composer" if me.bin => (false, Vec::new(), &path[1..]),
        "self" => (me.bin, current.to_vec(), &path[1..]),
        "super" => {
            let mut base = current.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|p| p == "super") {
                base.pop();
                rest = &rest[1..];
            }
            (me.bin, base, rest)
        }
        name if current == me.path && children.contains(name) => (me.bin, current.to_vec(), path),
        _ => return None,
    };
    base.extend(rest.iter().cloned());
    Some(Module { bin, path: base })
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let files = files();
    let modules: BTreeMap<Module, PathBuf> =
        files.iter().map(|(f, m)| (m.clone(), f.clone())).collect();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (file, m) in &files {
        let text = fs::read_to_string(file).unwrap();
        let toks = tokens(&text);
        let children: BTreeSet<String> = modules
            .keys()
            .filter(|k| {
                k.bin == m.bin && k.path.len() == m.path.len() + 1 && k.path.starts_with(&m.path)
            })
            .map(|k| k.path.last().unwrap().clone())
            .collect();
        let to = edges.entry(file.clone()).or_default();
        for r in referenced(&toks, m, &children) {
            if let Some(target) = file_of(&r, &modules) {
                if target != *file {
                    to.insert(target);
                }
            }
        }
    }
    let cycles = strongly_connected(&edges);
    let shown: Vec<String> = cycles
        .iter()
        .map(|c| {
            let names: Vec<String> = c
                .iter()
                .map(|f| f.strip_prefix(src()).unwrap().display().to_string())
                .collect();
            let why: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    edges[a].iter().filter(|b| c.contains(b)).map(move |b| {
                        format!(
                            "{} -> {}",
                            a.strip_prefix(src()).unwrap().display(),
                            b.strip_prefix(src()).unwrap().display()
                        )
                    })
                })
                .collect();
            format!("{{{}}}: {}", names.join(", "), why.join("; "))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "{} import cycle(s) between files of src/:\n{}",
        cycles.len(),
        shown.join("\n")
    );
}

/// The top-level modules of the library (`manifest`, `plan`, `cpio`, ...)
/// do not import each other in a circle either: each stage only looks
/// down the pipeline's layers.
#[test]
fn no_top_level_module_imports_one_that_imports_it_back() {
    let files = files();
    let modules: BTreeMap<Module, PathBuf> =
        files.iter().map(|(f, m)| (m.clone(), f.clone())).collect();
    let top = |m: &Module| -> PathBuf {
        PathBuf::from(m.path.first().cloned().unwrap_or_else(|| "lib".into()))
    };
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (file, m) in files.iter().filter(|(_, m)| !m.bin) {
        let text = fs::read_to_string(file).unwrap();
        let children: BTreeSet<String> = modules
            .keys()
            .filter(|k| !k.bin && k.path.len() == m.path.len() + 1 && k.path.starts_with(&m.path))
            .map(|k| k.path.last().unwrap().clone())
            .collect();
        let from = top(m);
        let to = edges.entry(from.clone()).or_default();
        for r in referenced(&tokens(&text), m, &children) {
            if r.bin || r.path.is_empty() {
                continue;
            }
            let t = top(&r);
            if t != from
                && modules
                    .keys()
                    .any(|k| !k.bin && k.path.first() == r.path.first())
            {
                to.insert(t);
            }
        }
    }
    let cycles = strongly_connected(&edges);
    assert!(
        cycles.is_empty(),
        "top-level modules import each other in a circle: {cycles:?}\n{edges:#?}"
    );
}

/// Tarjan's algorithm: the components of more than one file.
fn strongly_connected(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on: BTreeSet<&'a PathBuf>,
        next: usize,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        if let Some(ws) = s.edges.get(v) {
            for w in ws {
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let l = s.low[w].min(s.low[v]);
                    s.low.insert(v, l);
                } else if s.on.contains(w) {
                    let l = s.index[w].min(s.low[v]);
                    s.low.insert(v, l);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn the_checker_sees_cycles_and_use_trees() {
    let toks = tokens(
        "use crate::a::{b, c::{d as e, self}};\n// use crate::x;\nlet s = \"crate::y::z\";\n\
         fn f() { super::g::h(); child::k(); }\nmod tests { use super::*; }",
    );
    let me = Module {
        bin: false,
        path: vec!["p".into(), "q".into()],
    };
    let children: BTreeSet<String> = ["child".to_string()].into();
    let mut got: Vec<Vec<String>> = referenced(&toks, &me, &children)
        .into_iter()
        .map(|m| m.path)
        .collect();
    got.sort();
    let want: Vec<Vec<String>> = vec![
        vec!["a".into(), "b".into()],
        vec!["a".into(), "c".into()],
        vec!["a".into(), "c".into(), "d".into()],
        vec!["p".into(), "g".into(), "h".into()],
        vec!["p".into(), "q".into()],
        vec!["p".into(), "q".into(), "child".into(), "k".into()],
    ];
    assert_eq!(got, want);
    let mut edges = BTreeMap::new();
    let (a, b, c) = (PathBuf::from("a"), PathBuf::from("b"), PathBuf::from("c"));
    edges.insert(a.clone(), BTreeSet::from([b.clone()]));
    edges.insert(b.clone(), BTreeSet::from([a.clone(), c.clone()]));
    edges.insert(c.clone(), BTreeSet::new());
    assert_eq!(strongly_connected(&edges), vec![vec![a, b]]);
}

/// Library files that print, with the line.
#[test]
fn only_the_binary_prints() {
    let needles = [
        "print!",
        "println!",
        "eprint!",
        "eprintln!",
        "stdout()",
        "stderr()",
        "dbg!",
    ];
    let mut found = Vec::new();
    for (file, m) in files() {
        if m.bin {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for needle in needles {
                // A whole word: `print!` must not match `eprint!`.
                let hit = code.match_indices(needle).any(|(at, _)| {
                    !code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                });
                if hit {
                    found.push(format!(
                        "{}:{}: {}",
                        file.strip_prefix(src()).unwrap().display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the library prints (return the text or the warnings instead):\n{}",
        found.join("\n")
    );
}

/// The things #11 found written several times exist once: each needle may
/// appear (in code, outside comments and tests of other files) only in its
/// home file.
#[test]
fn each_shared_helper_has_one_home() {
    let homes: [(&str, &str); 7] = [
        ("GlobBuilder", "glob.rs"),
        ("GlobSetBuilder", "glob.rs"),
        ("fn checksum", "cpio/header.rs"),
        ("fn read_full", "io.rs"),
        ("enum AlignMode", "policy.rs"),
        ("fn escape", "path.rs"),
        ("fn edit_distance", "suggest.rs"),
    ];
    let mut found = Vec::new();
    for (file, _) in files() {
        let rel = file.strip_prefix(src()).unwrap().to_path_buf();
        let text = fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (needle, home) in homes {
                let whole = code.match_indices(needle).any(|(at, _)| {
                    !code[at + needle.len()..]
                        .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                });
                if whole && rel != Path::new(home) {
                    found.push(format!(
                        "{}:{}: {needle} (home: {home})",
                        rel.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "defined twice:\n{}", found.join("\n"));
}
