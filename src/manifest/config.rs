//! `composer config`: the configuration a build reads, shown whole. The
//! documents in the order they are read, every setting with the document
//! and line that set it (and those it overrode), every rule with its own;
//! and a manifest that reads those same documents in that same order, so
//! that building it gives the same image.

use std::fmt::Write as _;
use std::path::Path;

use super::load::{Doc, Loaded};
use super::node::{toml_doc, yaml_doc, Node, Value};
use crate::entry::Origin;
use crate::error::{Error, Result};

/// One document, as messages name it and as an `include` names it.
pub struct Document {
    /// Its path, or `profile generic`.
    pub name: String,
    /// What `include` takes to read it: a profile's name, else its
    /// absolute path.
    pub include: String,
    /// It is the init's profile, read because of `init` (not included).
    pub init_profile: bool,
}

/// A setting one document made (`image.compression`, `init`).
pub struct Setting {
    pub key: String,
    /// The value as written, in TOML.
    pub value: String,
    pub origin: Origin,
    /// A later document set the same key: this value is not the one used.
    pub overridden: bool,
}

/// A rule or list entry (rules of all documents add up).
pub struct Rule {
    /// `[[file]]`, `modules`, `[systemd] units`, `[omit] modules`, ...
    pub kind: String,
    /// What it names, in short: `src = "/usr/bin/busybox"`, `"ext4"`.
    pub what: String,
    pub origin: Origin,
    /// For an `[omit]` entry: what it took out of the image (`module
    /// floppy`, `/usr/bin/btrfs`), when the configuration was also lowered.
    pub left_out: Vec<String>,
}

pub struct Config {
    pub documents: Vec<Document>,
    pub settings: Vec<Setting>,
    pub rules: Vec<Rule>,
}

/// Tables whose lists of strings add up over the documents (each entry a
/// rule), where other keys are settings.
const LIST_TABLES: [&str; 4] = ["systemd", "firmware", "omit", "elf"];
/// Keys of a rule table that say best what it names, in this order.
const NAMING_KEYS: [&str; 8] = [
    "name", "path", "src", "pattern", "names", "patterns", "dst", "target",
];

/// The TOML text of a value, for settings and rules.
fn render(v: &Node) -> String {
    match &v.value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) => toml::Value::String(s.clone()).to_string(),
        Value::Seq(items) => format!(
            "[{}]",
            items.iter().map(render).collect::<Vec<_>>().join(", ")
        ),
        Value::Map(entries) => format!(
            "{{ {} }}",
            entries
                .iter()
                .map(|(k, v)| format!("{} = {}", key_text(k), render(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn key_text(k: &Node) -> String {
    match &k.value {
        Value::Str(s) => s.clone(),
        _ => render(k),
    }
}

/// A rule table in short: its naming keys (`name = "lvm"`), else its first.
fn summary(table: &Node) -> String {
    let Value::Map(entries) = &table.value else {
        return render(table);
    };
    let named: Vec<String> = NAMING_KEYS
        .iter()
        .filter_map(|want| {
            entries
                .iter()
                .find(|(k, _)| key_text(k) == *want)
                .map(|(k, v)| format!("{} = {}", key_text(k), render(v)))
        })
        .take(2)
        .collect();
    if !named.is_empty() {
        return named.join(", ");
    }
    entries
        .first()
        .map(|(k, v)| format!("{} = {}", key_text(k), render(v)))
        .unwrap_or_default()
}

/// The document's tree, read again (the model keeps no key positions of
/// settings).
fn tree(doc: &Doc) -> Result<Node> {
    let path = Path::new(&*doc.file);
    let text = crate::io::read_regular(path, crate::io::MAX_INPUT)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| Error::usage(format!("cannot read the manifest `{}` again", doc.file)))?;
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let parsed = if yaml {
        yaml_doc::parse(&text)
    } else {
        toml_doc::parse(&text)
    };
    parsed.map_err(|e| {
        let pos = e.pos.unwrap_or(super::node::Pos { line: 1, column: 1 });
        Error::at(doc.origin(pos), e.message)
    })
}

fn walk(doc: &Doc, root: &Node, settings: &mut Vec<Setting>, rules: &mut Vec<Rule>) {
    let Value::Map(entries) = &root.value else {
        return;
    };
    for (k, v) in entries {
        let key = key_text(k);
        match (key.as_str(), &v.value) {
            // How the documents are found: shown as the document list.
            ("include" | "dropins", _) => {}
            (_, Value::Seq(items)) if items.iter().all(|i| matches!(i.value, Value::Map(_))) => {
                for item in items {
                    rules.push(Rule {
                        kind: format!("[[{key}]]"),
                        what: summary(item),
                        origin: doc.origin(item.pos),
                        left_out: Vec::new(),
                    });
                }
            }
            (_, Value::Seq(items)) => {
                for item in items {
                    rules.push(Rule {
                        kind: key.clone(),
                        what: render(item),
                        origin: doc.origin(item.pos),
                        left_out: Vec::new(),
                    });
                }
            }
            (_, Value::Map(fields)) => {
                for (fk, fv) in fields {
                    let field = key_text(fk);
                    let list = matches!(&fv.value, Value::Seq(items) if items.iter().all(|i| matches!(i.value, Value::Str(_))));
                    if list && LIST_TABLES.contains(&key.as_str()) {
                        let Value::Seq(items) = &fv.value else {
                            continue;
                        };
                        for item in items {
                            rules.push(Rule {
                                kind: format!("[{key}] {field}"),
                                what: render(item),
                                origin: doc.origin(item.pos),
                                left_out: Vec::new(),
                            });
                        }
                    } else {
                        settings.push(Setting {
                            key: format!("{key}.{field}"),
                            value: render(fv),
                            origin: doc.origin(fk.pos),
                            overridden: false,
                        });
                    }
                }
            }
            _ => settings.push(Setting {
                key,
                value: render(v),
                origin: doc.origin(k.pos),
                overridden: false,
            }),
        }
    }
}

/// The configuration of `loaded`, as `composer config` shows it.
pub fn view(loaded: &Loaded) -> Result<Config> {
    let mut documents = Vec::new();
    let mut settings = Vec::new();
    let mut rules = Vec::new();
    for (i, doc) in loaded.docs.iter().enumerate() {
        let origin = doc.origin(super::node::Pos { line: 1, column: 1 });
        let include = match origin.profile() {
            Some(p) => p.to_string(),
            None => std::path::absolute(&*doc.file)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| doc.file.to_string()),
        };
        documents.push(Document {
            name: origin.file_label(),
            include,
            init_profile: i >= loaded.init_docs,
        });
        walk(doc, &tree(doc)?, &mut settings, &mut rules);
    }
    // The last document that sets a key wins (`vars.x`, `image.order`).
    for i in 0..settings.len() {
        settings[i].overridden = settings[i + 1..].iter().any(|s| s.key == settings[i].key);
    }
    Ok(Config {
        documents,
        settings,
        rules,
    })
}

impl Config {
    /// Notes on each `[omit]` entry what it took out of the image (the
    /// build's record of omissions).
    pub fn note_omitted(&mut self, omitted: &[crate::spec::Omitted]) {
        for r in &mut self.rules {
            for o in omitted.iter().filter(|o| o.by == r.origin) {
                r.left_out.push(match o.kind {
                    crate::spec::OmittedKind::Module => format!("module {}", o.name),
                    crate::spec::OmittedKind::Firmware => format!("firmware {}", o.name),
                    crate::spec::OmittedKind::File => format!("/{}", o.name),
                });
            }
        }
    }

    /// The documents' names, in the order read, a line each.
    pub fn files_text(&self) -> String {
        let mut out = String::new();
        for d in &self.documents {
            let _ = writeln!(
                out,
                "{}{}",
                d.name,
                if d.init_profile { " (the init's)" } else { "" }
            );
        }
        out
    }

    /// A manifest that reads the same documents in the same order (each
    /// is read once: a document's own includes and drop-ins are met
    /// already), with what they set and select as comments.
    pub fn manifest_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# The configuration `composer build` reads with these arguments: the\n\
             # documents in the order read (the `include` list below: building this\n\
             # file gives the same image), then what they set and select.\n"
        );
        let _ = writeln!(out, "include = [");
        for d in self.documents.iter().filter(|d| !d.init_profile) {
            let _ = writeln!(out, "    {},", toml::Value::String(d.include.clone()));
        }
        let _ = writeln!(out, "]");
        if let Some(d) = self.documents.iter().find(|d| d.init_profile) {
            let _ = writeln!(out, "# and, for `init`, {}", d.name);
        }
        let _ = writeln!(
            out,
            "\n# Settings (the last document that sets a key wins):"
        );
        for s in &self.settings {
            let _ = writeln!(
                out,
                "#   {} = {}    ({}{})",
                s.key,
                s.value,
                s.origin,
                if s.overridden {
                    "; overridden later"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(out, "\n# Rules (those of every document add up):");
        for r in &self.rules {
            let _ = write!(out, "#   {} {}    ({})", r.kind, r.what, r.origin);
            if !r.left_out.is_empty() {
                let _ = write!(out, "; left out: {}", crate::error::shorten(&r.left_out));
            }
            let _ = writeln!(out);
        }
        out
    }

    /// `{documents: [{name, include, init_profile}], settings: [{key,
    /// value, origin, overridden}], rules: [{kind, what, origin}]}`; an
    /// `[omit]` entry's rule also has `left_out: [...]`.
    pub fn json(&self) -> serde_json::Value {
        let origin = crate::why::origin_json;
        serde_json::json!({
            "documents": self.documents.iter().map(|d| serde_json::json!({
                "name": d.name,
                "include": d.include,
                "init_profile": d.init_profile,
            })).collect::<Vec<_>>(),
            "settings": self.settings.iter().map(|s| serde_json::json!({
                "key": s.key,
                "value": s.value,
                "origin": origin(&s.origin),
                "overridden": s.overridden,
            })).collect::<Vec<_>>(),
            "rules": self.rules.iter().map(|r| {
                let mut v = serde_json::json!({
                    "kind": r.kind,
                    "what": r.what,
                    "origin": origin(&r.origin),
                });
                if r.kind.starts_with("[omit]") {
                    v["left_out"] = serde_json::json!(r.left_out);
                }
                v
            }).collect::<Vec<_>>(),
        })
    }
}
