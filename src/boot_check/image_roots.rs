//! The layers of an image-based root that the kernel command line asks
//! for, which the running machine's block stack does not show: a live
//! medium's image under an overlayfs (`root=live:...`, `rd.live.image`),
//! a root kept under a tmpfs (`overlayroot=tmpfs`), and roots checked by
//! dm-verity (`roothash=`, `usrhash=`). Each is checked as both inits
//! bring it up (the book's "Live and image-based roots"): the modules, and
//! the program that opens a verity device (veritysetup in the shell init,
//! systemd-veritysetup in the systemd init).

use super::{check_modules, Check, Names};
use crate::resolve::kmod::ModuleTree;

/// What one command line asks for.
#[derive(Debug, Default)]
pub(super) struct ImageRoots {
    /// The live medium (`root=live:SPEC`, or `root=` with `rd.live.image`).
    pub live: Option<String>,
    /// `rd.live.squashimg=`.
    live_img: Option<String>,
    overlayroot: bool,
    /// `roothash=` / `usrhash=`: ("root" | "usr", the hash).
    verity: Vec<(&'static str, String)>,
}

fn off(v: &str) -> bool {
    matches!(v, "0" | "no" | "false" | "off")
}

impl ImageRoots {
    /// The options of `cmdline`, the last of each winning, as the inits
    /// read them.
    pub fn of(cmdline: &str) -> ImageRoots {
        let mut root: Option<&str> = None;
        let mut asked = false;
        let mut live_img = None;
        let mut overlayroot = false;
        let mut verity_on = true;
        let (mut roothash, mut usrhash) = (None, None);
        for w in cmdline.split_whitespace() {
            let (k, v) = w.split_once('=').unwrap_or((w, ""));
            match k {
                "root" => root = Some(v),
                "rd.live.image" => asked = v.is_empty() || v == "1",
                "rd.live.squashimg" => live_img = Some(v.to_string()),
                "overlayroot" => overlayroot = v == "tmpfs" || v.starts_with("tmpfs:"),
                "roothash" => roothash = Some(v.to_string()),
                "usrhash" => usrhash = Some(v.to_string()),
                "systemd.verity" | "rd.systemd.verity" => verity_on = !off(v),
                _ => {}
            }
        }
        let live = match root {
            Some(r) if r.starts_with("live:") => Some(r["live:".len()..].to_string()),
            Some(r) if asked && !r.is_empty() => Some(r.to_string()),
            _ => None,
        };
        let mut verity = Vec::new();
        if verity_on {
            verity.extend(roothash.map(|h| ("root", h)));
            verity.extend(usrhash.map(|h| ("usr", h)));
        }
        ImageRoots {
            live,
            live_img,
            overlayroot,
            verity,
        }
    }

    /// Whether the root= check against the running stack applies: not for
    /// a live medium, nor for a verity root named by its hash alone.
    pub fn root_is_elsewhere(&self, root: Option<&str>) -> Option<String> {
        if let Some(l) = &self.live {
            return Some(format!(
                "the root is the image of the live medium {l}: the running machine's block \
                 stack is not what this command line boots, and is not checked"
            ));
        }
        if root.is_none() && self.verity.iter().any(|(n, _)| *n == "root") {
            return Some(
                "roothash= without root=: the root is /dev/mapper/root, opened by dm-verity".into(),
            );
        }
        None
    }

    /// The checks of the layers asked for.
    pub fn checks(&self, names: &Names, tree: &ModuleTree) -> Vec<Check> {
        let mut out = Vec::new();
        if let Some(medium) = &self.live {
            let mut c = Check::new(format!("live medium {medium}"), 1);
            // The image's filesystem: squashfs unless its name says erofs.
            let image_fs = match &self.live_img {
                Some(n) if n.ends_with(".erofs") => "erofs",
                _ => "squashfs",
            };
            let mut queries = vec![image_fs.to_string(), "loop".into(), "overlay".into()];
            // A CD's filesystem, when the medium is named as a CD's.
            if medium.starts_with("CDLABEL=") {
                queries.push("isofs".into());
            }
            check_modules(&mut c, names, tree, &queries);
            if !c.ok() {
                c.fix = Some("`include = [\"image-roots\"]` (the generic profile has it)".into());
            }
            out.push(c);
        }
        if self.overlayroot && self.live.is_none() {
            let mut c = Check::new("overlayroot=tmpfs".into(), 0);
            check_modules(&mut c, names, tree, &["overlay".to_string()]);
            if !c.ok() {
                c.fix = Some("`modules = [\"overlay\"]` or `include = [\"image-roots\"]`".into());
            }
            out.push(c);
        }
        let systemd = ["usr/lib/systemd/systemd", "lib/systemd/systemd"]
            .iter()
            .any(|p| names.executable(p));
        for (name, hash) in &self.verity {
            let short: String = hash.chars().take(12).collect();
            let mut c = Check::new(format!("dm-verity /dev/mapper/{name} ({short}...)"), 1);
            check_modules(&mut c, names, tree, &["dm-verity".to_string()]);
            if systemd {
                for p in [
                    "usr/lib/systemd/systemd-veritysetup",
                    "usr/lib/systemd/system-generators/systemd-veritysetup-generator",
                ] {
                    if names.resolve(p).is_some() {
                        c.found.push(format!("/{p}"));
                    } else {
                        c.missing.push(format!("/{p}"));
                    }
                }
            } else {
                match names.program("veritysetup") {
                    Some(_) => c.found.push("veritysetup".into()),
                    None => c.missing.push("program veritysetup".into()),
                }
            }
            if !c.ok() {
                c.fix = Some("`include = [\"image-roots\"]` (the generic profile has it)".into());
            }
            out.push(c);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_says_which_layers() {
        let r = ImageRoots::of("root=live:CDLABEL=X rd.live.image rd.live.squashimg=r.erofs");
        assert_eq!(r.live.as_deref(), Some("CDLABEL=X"));
        assert_eq!(r.live_img.as_deref(), Some("r.erofs"));
        let r = ImageRoots::of("root=LABEL=x rd.live.image");
        assert_eq!(r.live.as_deref(), Some("LABEL=x"));
        assert!(ImageRoots::of("root=LABEL=x").live.is_none());
        assert!(ImageRoots::of("overlayroot=tmpfs:swap=1").overlayroot);
        assert!(!ImageRoots::of("overlayroot=tmpfs overlayroot=disabled").overlayroot);
        let r = ImageRoots::of("roothash=ab usrhash=cd");
        assert_eq!(r.verity.len(), 2);
        assert!(r.root_is_elsewhere(None).is_some());
        assert!(r.root_is_elsewhere(Some("/dev/vda1")).is_none());
        assert!(ImageRoots::of("roothash=ab systemd.verity=0")
            .verity
            .is_empty());
    }
}
