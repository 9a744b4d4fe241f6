//! Errors the library returns. Each one a user can cause names where it
//! comes from (file, line, column) and, where we know one, what to do.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::origin::Origin;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A problem in an input the user wrote (list file, manifest, argument),
    /// at a known place.
    #[error("{}{message}", Located(origin.as_ref()))]
    Input {
        origin: Option<Origin>,
        message: String,
        hint: Option<String>,
    },
    /// Not a failure of the command: `verify` found problems, `diff` found
    /// differences (exit status 1, where trouble is 2).
    #[error("{message}")]
    Found { message: String },
    /// An I/O failure on a path, outside any user-written file.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

struct Located<'a>(Option<&'a Origin>);

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(o) => write!(f, "{o}: "),
            None => Ok(()),
        }
    }
}

impl Error {
    /// An input error at `origin`.
    pub fn at(origin: Origin, message: impl Into<String>) -> Self {
        Error::Input {
            origin: Some(origin),
            message: message.into(),
            hint: None,
        }
    }

    /// An input error with no file position (a bad command-line value).
    pub fn usage(message: impl Into<String>) -> Self {
        Error::Input {
            origin: None,
            message: message.into(),
            hint: None,
        }
    }

    /// What `verify` or `diff` report when the image has problems or the
    /// images differ.
    pub fn found(message: impl Into<String>) -> Self {
        Error::Found {
            message: message.into(),
        }
    }

    /// True for [`Error::found`]: the command ran and its answer is "no".
    pub fn is_finding(&self) -> bool {
        matches!(self, Error::Found { .. })
    }

    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Adds (or replaces) the hint of an input error.
    pub fn with_hint(mut self, text: impl Into<String>) -> Self {
        if let Error::Input { hint, .. } = &mut self {
            *hint = Some(text.into());
        }
        self
    }

    /// The hint for something a rule asks of the root that is not there:
    /// `own` when the user wrote the rule; when a profile composer carries
    /// did, how to do without it from the user's own manifest (an `[omit]`
    /// table, `omit` the line of it), since the profile is no file of theirs.
    pub fn with_fix(self, own: impl Into<String>, omit: &str) -> Self {
        let hint = match self.origin().and_then(|o| o.profile().map(|p| (p, o.line))) {
            Some((p, line)) => format!(
                "line {line} of composer's profile `{p}` asks for it: install it into the root, \
                 or leave it out from your own manifest with\n  [omit]\n  {omit}"
            ),
            None => own.into(),
        };
        self.with_hint(hint)
    }

    pub fn hint(&self) -> Option<&str> {
        match self {
            Error::Input { hint, .. } => hint.as_deref(),
            Error::Io { .. } | Error::Found { .. } => None,
        }
    }

    pub fn origin(&self) -> Option<&Origin> {
        match self {
            Error::Input { origin, .. } => origin.as_ref(),
            Error::Io { .. } | Error::Found { .. } => None,
        }
    }
}

/// A list for a message: its first five names, and how many more.
pub fn shorten(names: &[String]) -> String {
    if names.len() <= 5 {
        names.join(", ")
    } else {
        format!("{} and {} more", names[..5].join(", "), names.len() - 5)
    }
}

/// A non-fatal finding that is printed but does not stop the build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub origin: Option<Origin>,
    pub message: String,
    /// For a warning that stands for many of one kind ("207 modules ask
    /// for firmware ..."): the warning each of them would be on its own,
    /// shown instead of the summary with `-v`.
    pub details: Vec<String>,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", Located(self.origin.as_ref()), self.message)
    }
}
