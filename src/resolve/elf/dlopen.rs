//! `.note.dlopen`: the freedesktop ELF dlopen metadata (owner `FDO`, type
//! `0x407c0c0a`), which systemd and others use to declare the libraries they
//! `dlopen()`.
//!
//! Input: a note's descriptor (a NUL-terminated JSON text). Output: the
//! [`DlopenDep`]s it lists. The payload is a JSON array of objects (or a
//! single object); each object has `soname` (a string or an array of
//! alternatives, best first) and optionally `feature`, `description` and
//! `priority` (`required`, `recommended` (the default) or `suggested`).

use std::fmt;

/// How much a program needs a dlopen dependency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Priority {
    Required,
    Recommended,
    Suggested,
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Priority::Required => "required",
            Priority::Recommended => "recommended",
            Priority::Suggested => "suggested",
        })
    }
}

/// Which dlopen dependencies to include: those of this priority or a more
/// important one.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Deserialize,
    schemars::JsonSchema,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum DlopenLevel {
    /// Read no `.note.dlopen` notes.
    None,
    /// Only `required` ones.
    Required,
    /// `required` and `recommended` ones (the default).
    #[default]
    Recommended,
    /// All of them.
    Suggested,
}

impl DlopenLevel {
    pub fn includes(self, p: Priority) -> bool {
        match self {
            DlopenLevel::None => false,
            DlopenLevel::Required => p == Priority::Required,
            DlopenLevel::Recommended => p <= Priority::Recommended,
            DlopenLevel::Suggested => true,
        }
    }
}

impl std::str::FromStr for DlopenLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "none" => DlopenLevel::None,
            "required" => DlopenLevel::Required,
            "recommended" => DlopenLevel::Recommended,
            "suggested" => DlopenLevel::Suggested,
            _ => {
                return Err(format!(
                    "unknown dlopen level `{s}` (expected none, required, recommended or suggested)"
                ))
            }
        })
    }
}

/// One dependency declared in a note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DlopenDep {
    /// Alternatives, best first: the first one found is loaded.
    pub sonames: Vec<String>,
    pub feature: Option<String>,
    pub description: Option<String>,
    pub priority: Priority,
}

/// Parses one note payload. Entries without a usable `soname` are reported
/// in the error list and skipped; an unknown priority counts as `suggested`.
pub fn parse_note(payload: &[u8]) -> (Vec<DlopenDep>, Vec<String>) {
    let mut deps = Vec::new();
    let mut problems = Vec::new();
    let value: serde_json::Value = match serde_json::from_slice(payload) {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!("invalid JSON in .note.dlopen: {e}"));
            return (deps, problems);
        }
    };
    let entries = match value {
        serde_json::Value::Array(a) => a,
        o @ serde_json::Value::Object(_) => vec![o],
        _ => {
            problems.push(".note.dlopen is neither a JSON array nor an object".to_string());
            return (deps, problems);
        }
    };
    for e in entries {
        let Some(obj) = e.as_object() else {
            problems.push(".note.dlopen entry is not a JSON object".to_string());
            continue;
        };
        let sonames: Vec<String> = match obj.get("soname") {
            Some(serde_json::Value::String(s)) => vec![s.clone()],
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        let sonames: Vec<String> = sonames.into_iter().filter(|s| !s.is_empty()).collect();
        if sonames.is_empty() {
            problems.push(".note.dlopen entry has no soname".to_string());
            continue;
        }
        let text = |k: &str| obj.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let priority = match text("priority").as_deref() {
            None | Some("recommended") => Priority::Recommended,
            Some("required") => Priority::Required,
            Some("suggested") => Priority::Suggested,
            Some(other) => {
                problems.push(format!(
                    ".note.dlopen entry for {} has unknown priority `{other}`; taken as suggested",
                    sonames[0]
                ));
                Priority::Suggested
            }
        };
        deps.push(DlopenDep {
            sonames,
            feature: text("feature"),
            description: text("description"),
            priority,
        });
    }
    (deps, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_style_array() {
        let (d, p) = parse_note(
            br#"[{"feature":"cryptsetup","description":"Support for disk encryption","priority":"suggested","soname":["libcryptsetup.so.12"]},{"soname":["libfoo.so.2","libfoo.so.1"]}]"#,
        );
        assert!(p.is_empty());
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].feature.as_deref(), Some("cryptsetup"));
        assert_eq!(d[0].priority, Priority::Suggested);
        assert_eq!(d[1].sonames, ["libfoo.so.2", "libfoo.so.1"]);
        assert_eq!(d[1].priority, Priority::Recommended);
    }

    #[test]
    fn single_object_and_string_soname() {
        let (d, p) = parse_note(br#"{"soname":"libz.so.1","priority":"required"}"#);
        assert!(p.is_empty());
        assert_eq!(d[0].sonames, ["libz.so.1"]);
        assert_eq!(d[0].priority, Priority::Required);
    }

    #[test]
    fn bad_payloads_are_reported() {
        assert_eq!(parse_note(b"not json").1.len(), 1);
        assert_eq!(parse_note(b"42").1.len(), 1);
        let (d, p) = parse_note(br#"[{"feature":"x"},{"soname":"a.so","priority":"urgent"}]"#);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].priority, Priority::Suggested);
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn levels() {
        use Priority::*;
        assert!(!DlopenLevel::None.includes(Required));
        assert!(DlopenLevel::Required.includes(Required));
        assert!(!DlopenLevel::Required.includes(Recommended));
        assert!(DlopenLevel::Recommended.includes(Recommended));
        assert!(!DlopenLevel::Recommended.includes(Suggested));
        assert!(DlopenLevel::Suggested.includes(Suggested));
        assert_eq!(
            "suggested".parse::<DlopenLevel>(),
            Ok(DlopenLevel::Suggested)
        );
        assert!("all".parse::<DlopenLevel>().is_err());
    }
}
