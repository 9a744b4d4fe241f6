//! A drop-in composer writes from the root's own `initrd-parse-etc.service`.
//!
//! After the root is mounted, `initrd-parse-etc.service` checks the root's fstab
//! for `/usr` and `x-initrd.mount` entries and then runs `systemctl --no-block
//! start initrd-cleanup.service`: a process (systemctl and its libraries, a tenth
//! of a second under emulation) whose only work is to queue one job, on the way
//! to the switch. `OnSuccess=initrd-cleanup.service` (systemd 249 and later)
//! queues the same job, with the same job mode (`replace`), once the unit has
//! succeeded; the drop-in keeps the unit's other commands as they are and leaves
//! that one out. It is written only when the root's unit has that exact line and
//! no drop-ins of its own, and the root's systemd is new enough.

use crate::resolve::systemd::ON_SUCCESS;

/// Where the drop-in goes in the image.
pub(super) const DROP_IN: &str = "/etc/systemd/system/initrd-parse-etc.service.d/composer.conf";

/// Whether an `ExecStart=` value is `systemctl --no-block start
/// initrd-cleanup.service` (any path to systemctl, any prefix characters).
fn starts_cleanup(value: &str) -> bool {
    let words: Vec<&str> = value
        .trim_start_matches(['-', '@', '!', '+', ':'])
        .split_whitespace()
        .collect();
    matches!(
        words.as_slice(),
        [program, "--no-block", "start", "initrd-cleanup.service"]
            if program.rsplit('/').next() == Some("systemctl")
    )
}

/// The drop-in for the root's `initrd-parse-etc.service` (`text`, the unit file;
/// `has_drop_ins`: the root has drop-ins for it), or None when it does not apply.
pub(super) fn parse_etc_drop_in(text: &str, has_drop_ins: bool, version: u32) -> Option<String> {
    if has_drop_ins || version < ON_SUCCESS {
        return None;
    }
    let mut section = "";
    let mut execs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.ends_with('\\') {
            // A continued line: the unit is not the plain one this expects.
            return None;
        }
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section != "[Service]" {
            continue;
        }
        if let Some(v) = line.strip_prefix("ExecStart=") {
            execs.push(v.trim());
        }
    }
    let cleanup = execs.iter().filter(|v| starts_cleanup(v)).count();
    let rest: Vec<&str> = execs.into_iter().filter(|v| !starts_cleanup(v)).collect();
    if cleanup != 1 || rest.is_empty() || rest.iter().any(|v| v.is_empty()) {
        return None;
    }
    let mut out = String::from(
        "# Written by composer from the root's initrd-parse-etc.service: the unit's\n\
         # commands but its last one, which only queued initrd-cleanup.service with\n\
         # systemctl; OnSuccess= queues it (one process less on the way to the root).\n\
         [Unit]\n\
         OnSuccess=initrd-cleanup.service\n\
         \n\
         [Service]\n\
         ExecStart=\n",
    );
    for v in rest {
        out.push_str("ExecStart=");
        out.push_str(v);
        out.push('\n');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// systemd 252's unit, as Debian 12 ships it.
    const V252: &str = "[Unit]\nDescription=Mountpoints Configured in the Real Root\n\
        AssertPathExists=/etc/initrd-release\nDefaultDependencies=no\n\
        Requires=initrd-root-fs.target\nAfter=initrd-root-fs.target\n\
        OnFailure=emergency.target\nOnFailureJobMode=replace-irreversibly\n\n\
        [Service]\nType=oneshot\n\
        # FIXME: once dracut is patched to install the symlink, change to:\n\
        # ExecStart=/lib/systemd/systemd-sysroot-fstab-check\n\
        ExecStart=@/lib/systemd/system-generators/systemd-fstab-generator systemd-sysroot-fstab-check\n\n\
        ExecStart=systemctl --no-block start initrd-cleanup.service\n";

    #[test]
    fn the_systemctl_step_becomes_on_success() {
        let d = parse_etc_drop_in(V252, false, 252).unwrap();
        let lines: Vec<&str> = d.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "[Unit]",
                "OnSuccess=initrd-cleanup.service",
                "",
                "[Service]",
                "ExecStart=",
                "ExecStart=@/lib/systemd/system-generators/systemd-fstab-generator \
                 systemd-sysroot-fstab-check",
            ]
        );
    }

    #[test]
    fn left_alone_when_it_may_not_apply() {
        // Too old for OnSuccess=; drop-ins of the root's own.
        assert_eq!(parse_etc_drop_in(V252, false, 247), None);
        assert_eq!(parse_etc_drop_in(V252, true, 252), None);
        // systemd 247's unit: a daemon-reload first, then two systemctl starts.
        let v247 = "[Service]\nType=oneshot\n\
            ExecStartPre=-/bin/systemctl daemon-reload\n\
            ExecStart=-/bin/systemctl --no-block start initrd-fs.target\n\
            ExecStart=/bin/systemctl --no-block start initrd-cleanup.service\n";
        let d = parse_etc_drop_in(v247, false, 252).unwrap();
        assert!(d.contains(
            "\nExecStart=\nExecStart=-/bin/systemctl --no-block start initrd-fs.target\n"
        ));
        assert!(!d
            .lines()
            .any(|l| l.starts_with("ExecStart=") && l.contains("initrd-cleanup")));
        // Nothing but the systemctl step, no such step, a continued line.
        let only = "[Service]\nExecStart=systemctl --no-block start initrd-cleanup.service\n";
        assert_eq!(parse_etc_drop_in(only, false, 252), None);
        let other = "[Service]\nExecStart=/bin/true\n";
        assert_eq!(parse_etc_drop_in(other, false, 252), None);
        let continued = "[Service]\nExecStart=/bin/true \\\n  x\n\
            ExecStart=systemctl --no-block start initrd-cleanup.service\n";
        assert_eq!(parse_etc_drop_in(continued, false, 252), None);
        // The step in another section is not the service's.
        let unit = "[Unit]\nExecStart=systemctl --no-block start initrd-cleanup.service\n\
            [Service]\nExecStart=/bin/true\n";
        assert_eq!(parse_etc_drop_in(unit, false, 252), None);
    }
}
