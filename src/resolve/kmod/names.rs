//! Module names as libkmod normalises them.

/// libkmod's `alias_normalize`: `-` becomes `_` outside `[...]`; None for
/// unbalanced brackets.
pub fn normalize_alias(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    normalize_alias_into(s, &mut out).then_some(out)
}

/// [`normalize_alias`] appending to `out`; false (and a partial `out`) for
/// unbalanced brackets.
pub(super) fn normalize_alias_into(s: &str, out: &mut String) -> bool {
    // `-`, `[` and `]` are ASCII: whole runs of other bytes are copied.
    let mut rest = s;
    let mut in_brackets = false;
    while let Some(at) = rest.find(['-', '[', ']']) {
        out.push_str(&rest[..at]);
        match rest.as_bytes()[at] {
            b'-' if !in_brackets => out.push('_'),
            b'[' if !in_brackets => {
                in_brackets = true;
                out.push('[');
            }
            b']' if in_brackets => {
                in_brackets = false;
                out.push(']');
            }
            b']' => return false,
            c => out.push(c as char),
        }
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    !in_brackets
}

/// libkmod's `modname_normalize`: up to the first `.`, `-` as `_`.
pub fn normalize_modname(s: &str) -> String {
    s.split('.').next().unwrap_or(s).replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_libkmod() {
        assert_eq!(
            normalize_alias("crypto-crc32c").as_deref(),
            Some("crypto_crc32c")
        );
        assert_eq!(
            normalize_alias("pci:v[0-9]d-x").as_deref(),
            Some("pci:v[0-9]d_x")
        );
        assert_eq!(normalize_alias("a[x-y[]-b-").as_deref(), Some("a[x-y[]_b_"));
        assert_eq!(normalize_alias("é-ü").as_deref(), Some("é_ü"));
        assert_eq!(normalize_alias("a]b"), None);
        assert_eq!(normalize_alias("a[b"), None);
        assert_eq!(normalize_alias("[a]]"), None);
        assert_eq!(normalize_modname("crc32c-intel.ko"), "crc32c_intel");
    }
}
