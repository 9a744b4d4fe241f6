//! The layers of an image-based root that the kernel command line asks
//! for, which the running machine's block stack does not show: a live
//! medium's image under an overlayfs (`root=live:...`, `rd.live.image`),
//! a root kept under a tmpfs (`overlayroot=tmpfs`), roots checked by
//! dm-verity (`roothash=`, `usrhash=`), and a root found by its partition
//! type (no `root=`, or `root=gpt-auto`). Each is checked as both inits
//! bring it up (the book's "Live and image-based roots"): the modules, and
//! the program that opens a verity device (veritysetup in the shell init,
//! systemd-veritysetup in the systemd init).

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
    /// No `root=` (nor a root hash), or `root=gpt-auto`: the root is found
    /// by its partition type on the disk the firmware booted from.
    gpt_auto: bool,
    /// `root=gpt-auto` itself.
    gpt_auto_asked: bool,
    /// `systemd.gpt_auto=0` or `rd.systemd.gpt_auto=0` (as written, the
    /// last of them winning): no root is found by its partition type.
    gpt_off: Option<String>,
    /// No `root=`, nor a verity root hash that names `/dev/mapper/root`.
    no_root: bool,
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
        let mut gpt_off = None;
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
                "systemd.gpt_auto" | "rd.systemd.gpt_auto" => {
                    gpt_off = off(v).then(|| w.to_string())
                }
                _ => {}
            }
        }
        let live = match root {
            Some(r) if r.starts_with("live:") => Some(r["live:".len()..].to_string()),
            Some(r) if asked && !r.is_empty() => Some(r.to_string()),
            _ => None,
        };
        let no_root = root.is_none() && (roothash.is_none() || !verity_on);
        let gpt_auto = gpt_off.is_none()
            && (root == Some("gpt-auto") || root.is_none() && (roothash.is_none() || !verity_on));
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
            gpt_auto,
            gpt_auto_asked: root == Some("gpt-auto"),
            gpt_off,
            no_root,
        }
    }

    /// The same, for a machine booted by UEFI firmware (`efi`) or not: with
    /// no `root=` at all, gpt-auto finds a root only on a machine the
    /// firmware says it booted from (an explicit `root=gpt-auto` is taken
    /// at its word).
    pub fn for_firmware(mut self, efi: bool) -> ImageRoots {
        if !efi && !self.gpt_auto_asked {
            self.gpt_auto = false;
        }
        self
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
        if self.gpt_auto {
            return Some(
                "no root= (or root=gpt-auto): the root is the partition of the root type on \
                 the disk the firmware booted from, found at boot; the running machine's \
                 block stack is not checked"
                    .into(),
            );
        }
        if root.is_none() && self.verity.iter().any(|(n, _)| *n == "root") {
            return Some(
                "roothash= without root=: the root is /dev/mapper/root, opened by dm-verity".into(),
            );
        }
        if self.gpt_off.is_some() && (self.no_root || self.gpt_auto_asked) {
            return Some(
                "the command line names no root device: the running machine's block stack is \
                 not checked"
                    .into(),
            );
        }
        None
    }

    /// The layers asked for, with what each needs of an image whose init
    /// is systemd (`systemd`) or composer's shell init.
    pub fn layers(&self, systemd: bool) -> Vec<Layer> {
        let mut out = Vec::new();
        if let Some(medium) = &self.live {
            // The image's filesystem: squashfs unless its name says erofs.
            let image_fs = match &self.live_img {
                Some(n) if n.ends_with(".erofs") => "erofs",
                _ => "squashfs",
            };
            let mut modules = vec![image_fs.to_string(), "loop".into(), "overlay".into()];
            // A CD's filesystem, when the medium is named as a CD's.
            if medium.starts_with("CDLABEL=") {
                modules.push("isofs".into());
            }
            out.push(Layer {
                name: format!("live medium {medium}"),
                depth: 1,
                modules,
                programs: Vec::new(),
                files: Vec::new(),
                conflicts: Vec::new(),
                fix: IMAGE_ROOTS_FIX.into(),
            });
        }
        if self.gpt_auto {
            // The boot loader's word on the partition it came from is an EFI
            // variable: efivarfs reads it. The shell init probes the
            // partitions' types with blkid; the systemd init leaves it all to
            // systemd-gpt-auto-generator.
            let (programs, files) = if systemd {
                (
                    Vec::new(),
                    vec!["/usr/lib/systemd/system-generators/systemd-gpt-auto-generator".into()],
                )
            } else {
                (vec!["blkid".into()], Vec::new())
            };
            out.push(Layer {
                name: "gpt-auto (the root partition of the boot disk)".into(),
                depth: 0,
                modules: vec!["efivarfs".into()],
                programs,
                files,
                conflicts: Vec::new(),
                fix: IMAGE_ROOTS_FIX.into(),
            });
        } else if let Some(off) = &self.gpt_off {
            // Asked for, or the only way left, and turned off: neither init
            // looks, and no root is found.
            let (name, what) = if self.gpt_auto_asked {
                ("root=gpt-auto", "which root=gpt-auto asks for")
            } else {
                (
                    "the root (no root= given)",
                    "and nothing else names the root",
                )
            };
            if self.gpt_auto_asked || self.no_root {
                out.push(Layer {
                    name: name.into(),
                    depth: 0,
                    modules: Vec::new(),
                    programs: Vec::new(),
                    files: Vec::new(),
                    conflicts: vec![format!(
                        "{off} turns off finding the root by its partition type, {what}"
                    )],
                    fix: CMDLINE_FIX.into(),
                });
            }
        }
        if self.overlayroot && self.live.is_none() {
            out.push(Layer {
                name: "overlayroot=tmpfs".into(),
                depth: 0,
                modules: vec!["overlay".into()],
                programs: Vec::new(),
                files: Vec::new(),
                conflicts: Vec::new(),
                fix: "`modules = [\"overlay\"]` or `include = [\"image-roots\"]`".into(),
            });
        }
        for (name, hash) in &self.verity {
            let short: String = hash.chars().take(12).collect();
            let (programs, files) = if systemd {
                (
                    Vec::new(),
                    vec![
                        "/usr/lib/systemd/systemd-veritysetup".to_string(),
                        "/usr/lib/systemd/system-generators/systemd-veritysetup-generator"
                            .to_string(),
                    ],
                )
            } else {
                (vec!["veritysetup".to_string()], Vec::new())
            };
            out.push(Layer {
                name: format!("dm-verity /dev/mapper/{name} ({short}...)"),
                depth: 1,
                modules: vec!["dm-verity".into()],
                programs,
                files,
                conflicts: Vec::new(),
                fix: IMAGE_ROOTS_FIX.into(),
            });
        }
        out
    }
}

const IMAGE_ROOTS_FIX: &str = "`include = [\"image-roots\"]` (the generic profile has it)";
const CMDLINE_FIX: &str = "the kernel command line (/etc/kernel/cmdline)";

/// One layer and what it needs of the image.
#[derive(Debug)]
pub(super) struct Layer {
    pub name: String,
    /// Nesting under the mount, as the check shows it.
    pub depth: usize,
    /// Module queries (names, as modprobe takes them).
    pub modules: Vec<String>,
    /// Programs, in the usual program directories.
    pub programs: Vec<String>,
    /// Files at these paths.
    pub files: Vec<String>,
    /// What the command line says against the layer (the image cannot
    /// help it).
    pub conflicts: Vec<String>,
    /// What adds what is missing.
    pub fix: String,
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
        assert!(ImageRoots::of("").gpt_auto);
        assert!(ImageRoots::of("root=gpt-auto").gpt_auto);
        assert!(!ImageRoots::of("root=/dev/vda1").gpt_auto);
        assert!(!ImageRoots::of("roothash=ab").gpt_auto);
        assert!(!ImageRoots::of("ro").for_firmware(false).gpt_auto);
        assert!(ImageRoots::of("ro").for_firmware(true).gpt_auto);
        assert!(ImageRoots::of("root=gpt-auto").for_firmware(false).gpt_auto);
        // Turned off: nothing is found, and root=gpt-auto is contradicted.
        let r = ImageRoots::of("rd.systemd.gpt_auto=0").for_firmware(true);
        assert!(!r.gpt_auto);
        assert!(r.root_is_elsewhere(None).is_some());
        let l = r.layers(false);
        assert_eq!(l[0].name, "the root (no root= given)");
        assert_eq!(
            l[0].conflicts,
            [
                "rd.systemd.gpt_auto=0 turns off finding the root by its partition type, and \
              nothing else names the root"
            ]
        );
        let r = ImageRoots::of("root=/dev/vda2 rd.systemd.gpt_auto=0");
        assert!(r.layers(false).is_empty() && r.root_is_elsewhere(Some("/dev/vda2")).is_none());
        let r = ImageRoots::of("root=gpt-auto systemd.gpt_auto=no");
        let l = r.layers(true);
        assert_eq!(l.len(), 1);
        assert!(
            l[0].conflicts[0].starts_with("systemd.gpt_auto=no turns off"),
            "{l:?}"
        );
        assert_eq!(l[0].fix, CMDLINE_FIX);
        let r = ImageRoots::of("root=gpt-auto systemd.gpt_auto=0 rd.systemd.gpt_auto=1");
        assert!(r.gpt_auto && r.layers(false)[0].conflicts.is_empty());
        assert_eq!(r.layers(false)[0].programs, ["blkid"]);
        assert!(r.layers(true)[0].files[0].ends_with("systemd-gpt-auto-generator"));
        let r = ImageRoots::of("roothash=ab usrhash=cd");
        assert_eq!(r.verity.len(), 2);
        assert!(r.root_is_elsewhere(None).is_some());
        assert!(r.root_is_elsewhere(Some("/dev/vda1")).is_none());
        assert!(ImageRoots::of("roothash=ab systemd.verity=0")
            .verity
            .is_empty());
    }
}
