//! `.sbat`: the Secure Boot Advanced Targeting lines shim checks against its
//! revocations (one CSV line per component: name, generation, vendor,
//! package, version, URL). A UKI carries one `.sbat` holding the stub's
//! lines, the kernel's (when its PE image has them), composer's, and what
//! the user adds, as ukify merges them: a revocation of any of them then
//! reaches the UKI.

use crate::error::{Error, Result};

/// composer's own line.
pub fn composer_line() -> String {
    format!(
        "composer,1,initramfs-composer,composer,{},-",
        env!("CARGO_PKG_VERSION")
    )
}

/// The lines of an `.sbat` section's bytes (up to its first NUL).
fn lines(section: &[u8]) -> Vec<String> {
    let end = section
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(section.len());
    String::from_utf8_lossy(&section[..end])
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Checks one SBAT line: six or more comma-separated fields, the first
/// (the component) not empty and the second (its generation) a number.
pub fn check_line(line: &str) -> std::result::Result<(), String> {
    let fields: Vec<&str> = line.split(',').collect();
    if fields.len() < 6 {
        return Err(format!(
            "`{line}` has {} field{}; an SBAT line has six: component,generation,vendor,package,version,url",
            fields.len(),
            if fields.len() == 1 { "" } else { "s" }
        ));
    }
    if fields[0].trim().is_empty() {
        return Err(format!("`{line}` names no component"));
    }
    if fields[1].trim().parse::<u32>().is_err() {
        return Err(format!(
            "`{line}`: the generation `{}` is not a number",
            fields[1]
        ));
    }
    Ok(())
}

/// The UKI's `.sbat`: the `sbat,...` version line once, first; then the
/// stub's lines, the kernel's, composer's and `extra`, each line once, in
/// that order. An `extra` line that is not an SBAT line is an error.
pub fn merge(stub: Option<&[u8]>, kernel: Option<&[u8]>, extra: &[String]) -> Result<String> {
    for l in extra {
        check_line(l).map_err(|e| {
            Error::usage(format!("--sbat: {e}"))
                .with_hint("give whole lines, as `name,1,Vendor,package,version,url`")
        })?;
    }
    let mut version: Option<String> = None;
    let mut out: Vec<String> = Vec::new();
    let all = stub
        .map(lines)
        .unwrap_or_default()
        .into_iter()
        .chain(kernel.map(lines).unwrap_or_default())
        .chain([composer_line()])
        .chain(extra.iter().map(|l| l.trim().to_string()));
    for l in all {
        if l.starts_with("sbat,") {
            version.get_or_insert(l);
        } else if !out.contains(&l) {
            out.push(l);
        }
    }
    let version = version.unwrap_or_else(|| {
        "sbat,1,SBAT Version,sbat,1,https://github.com/rhboot/shim/blob/main/SBAT.md".to_string()
    });
    let mut text = version;
    text.push('\n');
    for l in out {
        text.push_str(&l);
        text.push('\n');
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STUB: &[u8] =
        b"sbat,1,SBAT Version,sbat,1,https://github.com/rhboot/shim/blob/main/SBAT.md\n\
systemd,1,The systemd Developers,systemd,252,https://systemd.io/\n\0\0\0";
    const KERNEL: &[u8] =
        b"sbat,1,SBAT Version,sbat,1,https://github.com/rhboot/shim/blob/main/SBAT.md\n\
linux,1,Debian,linux,6.1.0,https://bugs.debian.org/\n";

    #[test]
    fn the_lines_are_merged_once_each_version_first() {
        let extra = vec!["site,1,Example,site,2,-".to_string()];
        let text = merge(Some(STUB), Some(KERNEL), &extra).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(lines[0].starts_with("sbat,1,SBAT Version"));
        assert!(lines[1].starts_with("systemd,1,"));
        assert!(lines[2].starts_with("linux,1,Debian"));
        assert_eq!(lines[3], composer_line());
        assert_eq!(lines[4], "site,1,Example,site,2,-");
        assert!(text.ends_with('\n') && !text.contains('\0'));
        // Without any section: the version line and composer's.
        let text = merge(None, None, &[]).unwrap();
        assert_eq!(text.lines().count(), 2);
    }

    #[test]
    fn lines_that_are_not_sbat_are_refused() {
        for bad in ["just text", "a,b,c,d,e,f", ",1,v,p,1,u"] {
            let e = merge(None, None, &[bad.to_string()]).unwrap_err();
            assert!(e.to_string().starts_with("--sbat: `"), "{e}");
        }
        assert!(check_line("x,2,V,p,1.0,https://example.org/").is_ok());
    }
}
