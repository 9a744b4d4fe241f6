//! `composer import-list`: a manifest that says exactly what a list says.
//!
//! The manifest keeps the list's order and adds no parent directories, so
//! building it gives the same archive as building the list.

use std::fmt::Write;

use crate::entry::{DeviceKind, Entry, Kind};
use crate::path::escape;

fn path_value(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        // `${` would be expanded as a variable; `$${` keeps it literal.
        Ok(s) => toml::Value::String(s.replace("${", "$${")).to_string(),
        Err(_) => format!("{{ escaped = {} }}", toml::Value::String(escape(bytes))),
    }
}

fn image_path(name: &[u8]) -> String {
    let mut p = b"/".to_vec();
    p.extend_from_slice(name);
    path_value(&p)
}

fn owner(out: &mut String, e: &Entry) {
    let _ = writeln!(out, "mode = \"{:04o}\"", e.mode);
    if e.uid != 0 {
        let _ = writeln!(out, "uid = {}", e.uid);
    }
    if e.gid != 0 {
        let _ = writeln!(out, "gid = {}", e.gid);
    }
}

/// Renders entries (from a list) as a TOML manifest; `from` names the list.
pub fn manifest_from_entries(entries: &[Entry], from: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Imported from {from} by composer import-list.");
    out.push_str("# The list's order is kept, no parent directories are added and\n");
    out.push_str("# alignment follows gen_init_cpio's rule, so this builds the same\n");
    out.push_str("# archive as the list.\n\n");
    out.push_str(
        "[image]\norder = \"manifest\"\nparents = false\nalign_mode = \"gen-init-cpio\"\n",
    );
    for e in entries {
        out.push('\n');
        match &e.kind {
            Kind::File { source, links } => {
                out.push_str("[[file]]\n");
                let _ = writeln!(
                    out,
                    "src = {}",
                    path_value(source.path.as_os_str().as_encoded_bytes())
                );
                let _ = writeln!(out, "dst = {}", image_path(&e.name));
                owner(&mut out, e);
                for l in links {
                    out.push_str("\n[[hardlink]]\n");
                    let _ = writeln!(out, "path = {}", image_path(l));
                    let _ = writeln!(out, "target = {}", image_path(&e.name));
                }
            }
            Kind::Dir => {
                out.push_str("[[dir]]\n");
                let _ = writeln!(out, "path = {}", image_path(&e.name));
                owner(&mut out, e);
            }
            Kind::Symlink { target } => {
                out.push_str("[[symlink]]\n");
                let _ = writeln!(out, "path = {}", image_path(&e.name));
                let _ = writeln!(out, "target = {}", path_value(target));
                owner(&mut out, e);
            }
            Kind::Node { kind, major, minor } => {
                out.push_str("[[node]]\n");
                let _ = writeln!(out, "path = {}", image_path(&e.name));
                let t = if *kind == DeviceKind::Block {
                    "block"
                } else {
                    "char"
                };
                let _ = writeln!(out, "type = \"{t}\"\nmajor = {major}\nminor = {minor}");
                owner(&mut out, e);
            }
            Kind::Pipe | Kind::Socket => {
                let word = if e.kind == Kind::Pipe {
                    "pipe"
                } else {
                    "socket"
                };
                let _ = writeln!(out, "[[{word}]]");
                let _ = writeln!(out, "path = {}", image_path(&e.name));
                owner(&mut out, e);
            }
        }
    }
    out
}
