//! Entries back to a gen_init_cpio list (`composer export-list`).

use std::os::unix::ffi::OsStrExt;

use crate::entry::{DeviceKind, Entry, Kind};
use crate::error::{Error, Result};
use crate::path::escape;

/// Bytes the list format cannot carry inside a field.
fn unlistable(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | 0)
}

fn list_field<'f>(entry: &Entry, what: &str, field: &'f [u8]) -> Result<&'f [u8]> {
    if let Some(i) = field.iter().position(|&b| unlistable(b)) {
        return Err(Error::at(
            entry.origin.clone(),
            format!(
                "{what} `{}` has {} at byte {i}, which a gen_init_cpio list cannot express",
                escape(field),
                match field[i] {
                    b' ' => "a space",
                    b'\t' => "a tab",
                    0 => "a NUL",
                    _ => "a line break or blank",
                }
            ),
        )
        .with_hint("rename it, or build the manifest directly instead of through a list"));
    }
    if field.windows(2).any(|w| w == b"${") {
        return Err(Error::at(
            entry.origin.clone(),
            format!(
                "{what} `{}` contains `${{`, which a list would expand",
                escape(field)
            ),
        ));
    }
    Ok(field)
}

/// Writes entries as a gen_init_cpio list that reads back to the same
/// entries (`composer build --list` and the kernel tool alike). Names and
/// sources a list cannot express are an error naming the entry's origin.
pub fn write_list(entries: &[Entry]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for e in entries {
        let name = list_field(e, "name", &e.name)?;
        out.extend_from_slice(e.kind.keyword().as_bytes());
        out.extend_from_slice(b" /");
        out.extend_from_slice(name);
        let owner = format!(" {:04o} {} {}", e.mode, e.uid, e.gid);
        match &e.kind {
            Kind::File { source, links } => {
                out.push(b' ');
                out.extend_from_slice(list_field(e, "source", source.path.as_os_str().as_bytes())?);
                out.extend_from_slice(owner.as_bytes());
                for l in links {
                    // The leading `/` also keeps a `#` or a non-ASCII first
                    // byte from ending the hardlink names in gen_init_cpio.
                    let l = list_field(e, "hardlink name", l)?;
                    out.extend_from_slice(b" /");
                    out.extend_from_slice(l);
                }
            }
            Kind::Symlink { target } => {
                out.push(b' ');
                out.extend_from_slice(list_field(e, "symlink target", target)?);
                out.extend_from_slice(owner.as_bytes());
            }
            Kind::Node { kind, major, minor } => {
                out.extend_from_slice(owner.as_bytes());
                let t = if *kind == DeviceKind::Block { 'b' } else { 'c' };
                out.extend_from_slice(format!(" {t} {major} {minor}").as_bytes());
            }
            Kind::Dir | Kind::Pipe | Kind::Socket => out.extend_from_slice(owner.as_bytes()),
        }
        out.push(b'\n');
    }
    Ok(out)
}
