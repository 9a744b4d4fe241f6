//! crypttab(5): `name encrypted-device [key-file [options]]`, one mapping a
//! line; `#` starts a comment line; fields are separated by white space
//! and may be quoted (`"..."`, `'...'`) with `\` escaping the next
//! character, as systemd's generator reads them. A line with fewer than two
//! or more than four fields is skipped and reported.

use super::model::{CrypttabEntry, DeviceSpec};

/// The longest line read; the rest of a longer one is ignored with it.
const MAX_LINE: usize = 4096;
/// The most lines taken.
const MAX_ENTRIES: usize = 1024;

/// Splits a line into fields, unquoting. None when a quote is not closed.
fn fields(line: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_field = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                cur.push(chars.next()?);
                in_field = true;
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_field = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_field {
                    out.push(std::mem::take(&mut cur));
                    in_field = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_field = true;
            }
        }
    }
    if quote.is_some() {
        return None;
    }
    if in_field {
        out.push(cur);
    }
    Some(out)
}

/// How the second field names the device.
pub fn device_spec(s: &str) -> DeviceSpec {
    let (key, value) = s.split_once('=').unwrap_or(("", s));
    match key.to_ascii_uppercase().as_str() {
        "UUID" => DeviceSpec::Uuid(value.to_string()),
        "PARTUUID" => DeviceSpec::PartUuid(value.to_string()),
        "LABEL" => DeviceSpec::Label(value.to_string()),
        "PARTLABEL" => DeviceSpec::PartLabel(value.to_string()),
        _ => DeviceSpec::Path(s.to_string()),
    }
}

/// The entries of a crypttab text, and a message for each line skipped.
pub fn parse(text: &str) -> (Vec<CrypttabEntry>, Vec<String>) {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = match raw.char_indices().nth(MAX_LINE) {
            Some((at, _)) => &raw[..at],
            None => raw,
        };
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if out.len() >= MAX_ENTRIES {
            bad.push(format!(
                "crypttab: more than {MAX_ENTRIES} entries, the rest left out"
            ));
            break;
        }
        let f = match fields(t) {
            Some(f) if (2..=4).contains(&f.len()) => f,
            _ => {
                bad.push(format!(
                    "crypttab line {line_no}: not `name device [keyfile [options]]`, skipped"
                ));
                continue;
            }
        };
        let keyfile = f
            .get(2)
            .filter(|k| !matches!(k.as_str(), "" | "none" | "-"))
            .cloned();
        out.push(CrypttabEntry {
            line: line_no,
            name: f[0].clone(),
            device: device_spec(&f[1]),
            keyfile,
            options: f.get(3).cloned().unwrap_or_default(),
        });
    }
    (out, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_lines_crypttab_5_describes() {
        let text = "# comment\n\
            \n\
            luks-0a1b UUID=0a1b-22 none luks,discard\n\
            \tswap /dev/sda3 /dev/urandom swap,cipher=aes-xts-plain64\n\
            home PARTUUID=abcd-01 - \n\
            data /dev/disk/by-id/x\n\
            quoted \"/dev/disk/by-label/my disk\" '/etc/keys/a b' luks\n\
            broken\n\
            too many fields here really\n\
            open \"unterminated\n";
        let (e, bad) = parse(text);
        assert_eq!(e.len(), 5);
        assert_eq!(e[0].line, 3);
        assert_eq!(e[0].name, "luks-0a1b");
        assert_eq!(e[0].device, DeviceSpec::Uuid("0a1b-22".into()));
        assert_eq!(e[0].keyfile, None);
        assert_eq!(e[0].options, "luks,discard");
        assert_eq!(e[1].keyfile.as_deref(), Some("/dev/urandom"));
        assert_eq!(e[2].device, DeviceSpec::PartUuid("abcd-01".into()));
        assert_eq!(e[2].keyfile, None);
        assert_eq!(e[2].options, "");
        assert_eq!(e[3].device, DeviceSpec::Path("/dev/disk/by-id/x".into()));
        assert_eq!(
            e[4].device,
            DeviceSpec::Path("/dev/disk/by-label/my disk".into())
        );
        assert_eq!(e[4].keyfile.as_deref(), Some("/etc/keys/a b"));
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(bad[0].contains("line 8"));
    }

    #[test]
    fn odd_input_is_bounded() {
        let long = format!("n {}\n", "x".repeat(100_000));
        let (e, _) = parse(&long);
        assert_eq!(e[0].device, DeviceSpec::Path("x".repeat(MAX_LINE - 2)));
        let many = "a b\n".repeat(MAX_ENTRIES + 5);
        let (e, bad) = parse(&many);
        assert_eq!(e.len(), MAX_ENTRIES);
        assert_eq!(bad.len(), 1);
        let (e, _) = parse("a b \\");
        assert!(e.is_empty());
    }
}
