//! `[systemd.layers]`: the units, generators and udev rules that only one layer
//! of a block stack (LUKS, LVM, md RAID, device-mapper) or hibernation needs.
//!
//! An image whose `[stack]` is read from the root (the hostonly profile) is made
//! for one machine, as `dracut --hostonly` makes one: it leaves out what the
//! layers that machine's root does not have would need. On a plain root that is
//! two generators fewer at every boot (systemd runs each one before it loads a
//! unit), nine udev rules files fewer for udevd to read before it handles an
//! event, and lvm and mdadm, which the rules run, out of the image. Other
//! images, and a hostonly image that also includes the `storage` profile, take
//! them all.

use std::collections::HashSet;
use std::path::Path;

use crate::error::Result;
use crate::manifest::load::{expand, Loaded};
use crate::stack::{Kind, Stack};

/// The layers `[systemd.layers]` names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Have {
    pub crypt: bool,
    pub lvm: bool,
    pub md: bool,
    pub dm: bool,
    pub resume: bool,
}

impl Have {
    /// Every layer: nothing is left out.
    const ALL: Have = Have {
        crypt: true,
        lvm: true,
        md: true,
        dm: true,
        resume: true,
    };
}

/// The block layers of `stack` (resume is not a block layer: false).
pub(super) fn of_stack(stack: &Stack) -> Have {
    let mut have = Have::default();
    for layer in &stack.layers {
        match layer.kind {
            Kind::Crypt(_) => have.crypt = true,
            Kind::Lvm(_) => have.lvm = true,
            Kind::Md(_) => have.md = true,
            Kind::Multipath(_) | Kind::Mapper(_) => have.dm = true,
            _ => {}
        }
    }
    have.dm |= have.crypt || have.lvm;
    have
}

/// Whether a machine resumes from hibernation: a swap device in use (`swaps`,
/// as /proc/swaps lists them after its header line), `resume=` on its command
/// line (`cmdline`), or a resume device the kernel was given (`sys_resume`,
/// /sys/power/resume, `0:0` when none).
pub(super) fn resumes(swaps: &str, cmdline: &str, sys_resume: &str) -> bool {
    swaps.lines().skip(1).any(|l| !l.trim().is_empty())
        || cmdline
            .split_whitespace()
            .any(|a| a.strip_prefix("resume=").is_some_and(|v| !v.is_empty()))
        || !matches!(sys_resume.trim(), "" | "0:0")
}

/// The running machine's: from /proc and /sys, each read bounded.
fn running_resumes() -> bool {
    let read = |p: &str| {
        crate::stack::read_bounded(Path::new(p), 1 << 20)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    resumes(
        &read("/proc/swaps"),
        &read("/proc/cmdline"),
        &read("/sys/power/resume"),
    )
}

/// What the image's machine has, for `[systemd.layers]`: everything unless
/// `[stack] from_root` is on (and the stack could be read; its error is
/// `[stack]`'s to report); the block layers all when the `storage` profile is
/// among the documents.
fn have(loaded: &Loaded) -> Have {
    if !super::stack::from_root(loaded) {
        return Have::ALL;
    }
    let Ok(stack) = crate::stack::running(&loaded.root) else {
        return Have::ALL;
    };
    let mut have = if loaded.has_profile("storage") {
        Have::ALL
    } else {
        of_stack(&stack)
    };
    have.resume = running_resumes();
    have
}

/// The names `[systemd.layers]` leaves out of the image.
pub(super) fn left_out(loaded: &Loaded) -> Result<HashSet<String>> {
    let have = have(loaded);
    let mut out = HashSet::new();
    if have == Have::ALL {
        return Ok(out);
    }
    for doc in &loaded.docs {
        let Some(s) = &doc.manifest.systemd else {
            continue;
        };
        let l = &s.value.layers;
        for (list, kept) in [
            (&l.crypt, have.crypt),
            (&l.lvm, have.lvm),
            (&l.md, have.md),
            (&l.dm, have.dm),
            (&l.resume, have.resume),
        ] {
            if kept {
                continue;
            }
            for v in list {
                out.insert(expand(v, v.pos, doc, &loaded.vars)?);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::tests::{root_on, Fake, LUKS_HEX};

    #[test]
    fn a_plain_root_has_no_layer_a_luks_lvm_root_has_three() {
        let f = Fake::new();
        f.virtio(4, "vda", "254:0");
        let plain = f.read(&root_on("254:0", "ext4", "/dev/vda"), "");
        assert_eq!(of_stack(&plain), Have::default());

        let f = Fake::new();
        let vda = f.virtio(4, "vda", "254:0");
        let crypt = f.luks("dm-0", "253:0", LUKS_HEX, &vda);
        f.lv("dm-1", "253:1", "vg-sys", "root", "", &[&crypt]);
        let s = f.read(&root_on("253:1", "ext4", "/dev/mapper/vg--sys-root"), "");
        let want = Have {
            crypt: true,
            lvm: true,
            dm: true,
            ..Have::default()
        };
        assert_eq!(of_stack(&s), want);

        let f = Fake::new();
        f.raid1_over_two_virtio_disks();
        let s = f.read(&root_on("9:127", "ext4", "/dev/md127"), "");
        let want = Have {
            md: true,
            ..Have::default()
        };
        assert_eq!(of_stack(&s), want);
    }

    #[test]
    fn resume_is_a_swap_in_use_or_a_resume_device() {
        let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert!(!resumes(header, "root=/dev/vda ro quiet", "0:0\n"));
        assert!(!resumes("", "", ""));
        assert!(resumes(
            &format!("{header}/dev/vda2  partition\t1048572\t0\t-2\n"),
            "root=/dev/vda1",
            "0:0\n"
        ));
        assert!(resumes(header, "root=/dev/vda1 resume=UUID=abc", "0:0"));
        assert!(!resumes(header, "root=/dev/vda1 resume=", "0:0"));
        assert!(!resumes(header, "noresume", "0:0"));
        assert!(resumes(header, "", "254:2\n"));
    }
}
