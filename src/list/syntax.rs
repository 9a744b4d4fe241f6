//! What both list readers share: the options, the result, and the
//! grammar's entry types and fields.

use std::ffi::OsString;

use crate::entry::{Entry, Kind};
use crate::error::Warning;

/// How `${VAR}` in a list is looked up.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// The process environment, for [`ListOptions::env`].
pub fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

pub struct ListOptions<'a> {
    /// Read exactly as gen_init_cpio does.
    pub compat: bool,
    pub env: EnvLookup<'a>,
}

impl Default for ListOptions<'_> {
    fn default() -> Self {
        ListOptions {
            compat: false,
            env: &process_env,
        }
    }
}

#[derive(Debug, Default)]
pub struct ParsedList {
    pub entries: Vec<Entry>,
    pub warnings: Vec<Warning>,
}

pub(super) const TYPES: [&str; 6] = ["file", "dir", "nod", "slink", "pipe", "sock"];

/// The fields each entry type takes after the type word.
pub(super) fn field_names(kind: &str) -> &'static [&'static str] {
    match kind {
        "file" => &["<name>", "<location>", "<mode>", "<uid>", "<gid>"],
        "dir" | "pipe" | "sock" => &["<name>", "<mode>", "<uid>", "<gid>"],
        "nod" => &[
            "<name>",
            "<mode>",
            "<uid>",
            "<gid>",
            "<dev_type>",
            "<maj>",
            "<min>",
        ],
        "slink" => &["<name>", "<target>", "<mode>", "<uid>", "<gid>"],
        _ => &[],
    }
}

/// The kinds whose lines are just `<name> <mode> <uid> <gid>`.
pub(super) fn generic_kind(word: &str) -> Kind {
    match word {
        "pipe" => Kind::Pipe,
        "sock" => Kind::Socket,
        _ => Kind::Dir,
    }
}
