//! The book's manifest reference cannot fall behind the schema: every key the
//! committed JSON Schema knows (at the top level and, recursively, in every
//! `$defs` entry) is written in book/src/manifest.md as a backquoted key,
//! e.g. `` `dir_mode` ``. And every TOML or YAML snippet in the reference
//! and the tutorial is a valid manifest by the schema of the code
//! (`composer schema`; that the committed file matches it is checked in
//! manifest_examples.rs).

use crate::support;

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn schema() -> serde_json::Value {
    let text = fs::read_to_string(root().join("schema/composer.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every name under a `properties` object anywhere in `v`.
fn property_names(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map {
                if k == "properties" {
                    if let serde_json::Value::Object(props) = child {
                        out.extend(props.keys().cloned());
                    }
                }
                property_names(child, out);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                property_names(item, out);
            }
        }
        _ => {}
    }
}

#[test]
fn reference_names_every_schema_key() {
    let schema = schema();
    let mut keys = BTreeSet::new();
    property_names(&schema, &mut keys);
    // A sanity check that the walk reached $defs, not only the top level.
    for k in ["file", "dir_mode", "escaped", "search_path", "major"] {
        assert!(keys.contains(k), "schema walk missed `{k}`: {keys:?}");
    }
    let book = fs::read_to_string(root().join("book/src/manifest.md")).unwrap();
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| !book.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "book/src/manifest.md does not describe these schema keys: {missing:?}"
    );
}

/// The fenced ```toml and ```yaml blocks of a Markdown text.
fn snippets(markdown: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in markdown.lines() {
        match &mut current {
            None => {
                if let Some(lang) = line.strip_prefix("```") {
                    if lang == "toml" || lang == "yaml" {
                        current = Some((lang.to_string(), String::new()));
                    }
                }
            }
            Some((_, text)) => {
                if line.starts_with("```") {
                    out.push(current.take().unwrap());
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
    }
    out
}

fn as_json(lang: &str, text: &str) -> Result<serde_json::Value, String> {
    if lang == "toml" {
        let v: toml::Value = toml::from_str(text).map_err(|e| e.to_string())?;
        serde_json::to_value(v).map_err(|e| e.to_string())
    } else {
        let v: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        serde_json::to_value(v).map_err(|e| e.to_string())
    }
}

#[test]
fn book_snippets_are_valid_manifests() {
    let out = support::run_ok(support::composer().arg("schema"));
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let mut checked = 0;
    let mut problems = Vec::new();
    for page in ["manifest.md", "tutorial.md"] {
        let path = root().join("book/src").join(page);
        let text = fs::read_to_string(&path).unwrap();
        for (i, (lang, snippet)) in snippets(&text).iter().enumerate() {
            checked += 1;
            match as_json(lang, snippet) {
                Err(e) => problems.push(format!("{page} {lang} block {i}: {e}\n{snippet}")),
                Ok(doc) => {
                    let errors: Vec<String> = validator
                        .iter_errors(&doc)
                        .map(|e| format!("{}: {e}", e.instance_path()))
                        .collect();
                    if !errors.is_empty() {
                        problems.push(format!(
                            "{page} {lang} block {i}: {}\n{snippet}",
                            errors.join("; ")
                        ));
                    }
                }
            }
        }
    }
    assert!(checked >= 40, "only {checked} snippets found");
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Every page of the book is in SUMMARY.md, and every link there exists.
#[test]
fn summary_lists_every_page() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let linked: Vec<String> = summary
        .split("](")
        .skip(1)
        .filter_map(|s| s.split(')').next())
        .map(str::to_string)
        .collect();
    for l in &linked {
        assert!(src.join(l).is_file(), "SUMMARY.md links to missing {l}");
    }
    for e in std::fs::read_dir(&src).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && name != "SUMMARY.md" {
            assert!(linked.contains(&name), "{name} is not in SUMMARY.md");
        }
    }
}

/// A heading's anchor as mdbook makes it: lower case, spaces to `-`, only
/// letters, digits, `-` and `_` kept.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The lines of a page outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// `|` that separate table cells: not inside a code span, not escaped.
fn cell_separators(line: &str) -> usize {
    let mut in_code = false;
    let mut n = 0;
    let mut prev = ' ';
    for c in line.chars() {
        match c {
            '`' => in_code = !in_code,
            '|' if !in_code && prev != '\\' => n += 1,
            _ => {}
        }
        prev = c;
    }
    n
}

/// Every link between pages of the book reaches a page that exists and, with
/// `#anchor`, a heading of that page; every table row has as many cells as
/// its header (what `mdbook build` would silently render wrong).
#[test]
fn links_and_tables_of_the_book_are_whole() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src");
    let mut pages = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            pages.insert(name, std::fs::read_to_string(&p).unwrap());
        }
    }
    let anchors = |text: &str| -> BTreeSet<String> {
        prose(text)
            .iter()
            .filter_map(|l| l.strip_prefix('#'))
            .map(|h| anchor(h.trim_start_matches('#')))
            .collect()
    };
    let mut problems = Vec::new();
    let mut links = 0;
    for (name, text) in &pages {
        let lines = prose(text);
        for (i, line) in lines.iter().enumerate() {
            // Links: ](target) outside code spans.
            let mut rest = *line;
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let Some(end) = after.find(')') else { break };
                let target = &after[..end];
                rest = &after[end..];
                if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                    continue;
                }
                links += 1;
                let (page, frag) = match target.split_once('#') {
                    Some((p, f)) => (if p.is_empty() { name.as_str() } else { p }, Some(f)),
                    None => (target, None),
                };
                let Some(page_text) = pages.get(page) else {
                    problems.push(format!("{name}: link to missing page `{target}`"));
                    continue;
                };
                if let Some(f) = frag {
                    if !anchors(page_text).contains(f) {
                        problems.push(format!("{name}: `{target}`: {page} has no heading `#{f}`"));
                    }
                }
            }
            // Tables: a header row, its |---| row, then rows of the same width.
            let is_row = |l: &str| l.trim_start().starts_with('|');
            if is_row(line)
                && (i == 0 || !is_row(lines[i - 1]))
                && lines
                    .get(i + 1)
                    .is_some_and(|l| l.contains("---") && is_row(l))
            {
                let width = cell_separators(line);
                for row in lines[i + 1..].iter().take_while(|l| is_row(l)) {
                    if cell_separators(row) != width {
                        problems.push(format!(
                            "{name}: table row has {} cells, its header {}: {row}",
                            cell_separators(row).saturating_sub(1),
                            width.saturating_sub(1)
                        ));
                    }
                }
            }
        }
    }
    assert!(links >= 20, "only {links} links found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
