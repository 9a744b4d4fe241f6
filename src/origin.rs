//! Where an entry or an error comes from.

use std::fmt;
use std::sync::Arc;

/// Where an entry (or an error) comes from: a file, a 1-based line and column,
/// and optionally the rule that produced it.
///
/// Every entry carries one, so it is small (16 bytes): the file and the rule
/// are shared by all the origins in one [`Place`], and [`Origin::at`] makes
/// another position in the same place without an allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Origin {
    place: Arc<Place>,
    pub line: u32,
    pub column: u32,
}

/// A file, and the rule of it that made an entry.
#[derive(Debug, PartialEq, Eq, Hash, Default)]
struct Place {
    file: Arc<str>,
    rule: Option<Arc<str>>,
    /// The file is a profile composer carries (`file` is its name): shown
    /// as `profile generic, line 47`, not as the path of composer's copy.
    profile: bool,
}

impl Origin {
    /// A position in `file`, of no rule. Each call makes a new place: for
    /// many positions in one file, make one and use [`Origin::at`].
    pub fn new(file: Arc<str>, line: u32, column: u32) -> Self {
        Origin {
            place: Arc::new(Place {
                file,
                rule: None,
                profile: false,
            }),
            line,
            column,
        }
    }

    /// A position in the profile composer carries named `name` (`generic`).
    pub fn in_profile(name: Arc<str>, line: u32, column: u32) -> Self {
        Origin {
            place: Arc::new(Place {
                file: name,
                rule: None,
                profile: true,
            }),
            line,
            column,
        }
    }

    /// Another position in the same file and rule.
    pub fn at(&self, line: u32, column: u32) -> Origin {
        Origin {
            place: self.place.clone(),
            line,
            column,
        }
    }

    /// The file's path, or for a profile composer carries, its name.
    pub fn file(&self) -> &Arc<str> {
        &self.place.file
    }

    /// The name of the profile composer carries this position is in.
    pub fn profile(&self) -> Option<&str> {
        self.place.profile.then_some(&*self.place.file)
    }

    /// The file as messages name it: its path, or `profile generic`.
    pub fn file_label(&self) -> String {
        match self.profile() {
            Some(p) => format!("profile {p}"),
            None => self.place.file.to_string(),
        }
    }

    /// The rule that made the entry (`file /init`, `modules "ext4"`).
    pub fn rule(&self) -> Option<&str> {
        self.place.rule.as_deref()
    }

    /// This position as made by `rule`.
    pub fn with_rule(&self, rule: impl Into<Arc<str>>) -> Origin {
        self.with_place(Some(rule.into()))
    }

    /// This position, of no rule.
    pub fn without_rule(&self) -> Origin {
        if self.place.rule.is_none() {
            return self.clone();
        }
        self.with_place(None)
    }

    fn with_place(&self, rule: Option<Arc<str>>) -> Origin {
        Origin {
            place: Arc::new(Place {
                file: self.place.file.clone(),
                rule,
                profile: self.place.profile,
            }),
            line: self.line,
            column: self.column,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.place.profile {
            return write!(f, "profile {}, line {}", self.place.file, self.line);
        }
        write!(f, "{}:{}:{}", self.place.file, self.line, self.column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_two_words() {
        assert_eq!(std::mem::size_of::<Origin>(), 16);
    }

    #[test]
    fn positions_share_their_place() {
        let a = Origin::new(Arc::from("m.toml"), 3, 1).with_rule("dir");
        let b = a.at(9, 2);
        assert!(Arc::ptr_eq(&a.place, &b.place));
        assert_eq!(
            (b.file().as_ref(), b.rule(), b.line, b.column),
            ("m.toml", Some("dir"), 9, 2)
        );
        assert_eq!(b.to_string(), "m.toml:9:2");
        let c = b.without_rule();
        assert_eq!((c.rule(), c.to_string()), (None, "m.toml:9:2".to_string()));
        assert_ne!(b, c);
        assert_eq!(a.at(9, 2), b);
    }

    #[test]
    fn a_profile_is_named_not_located_in_a_cache() {
        let o = Origin::in_profile(Arc::from("generic"), 47, 5).with_rule("modules");
        assert_eq!(o.to_string(), "profile generic, line 47");
        assert_eq!(o.profile(), Some("generic"));
        assert_eq!(o.without_rule().profile(), Some("generic"));
        assert_eq!(o.file_label(), "profile generic");
        assert_eq!(Origin::new(Arc::from("generic"), 1, 1).profile(), None);
    }
}
