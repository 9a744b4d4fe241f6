//! Where an entry or an error comes from.

use std::fmt;
use std::sync::Arc;

/// Where an entry (or an error) comes from: a file, a 1-based line and column,
/// and optionally the rule that produced it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Origin {
    pub file: Arc<str>,
    pub line: u32,
    pub column: u32,
    pub rule: Option<Arc<str>>,
}

impl Origin {
    pub fn new(file: Arc<str>, line: u32, column: u32) -> Self {
        Origin {
            file,
            line,
            column,
            rule: None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}
