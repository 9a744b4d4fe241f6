//! The cold plug's share of an image: what each init needs to know of it from
//! the build.
//!
//! Both inits cold plug: udev, or composer's shell init, loads the driver of
//! every device present that has a modalias. When the image's `/init`
//! already loads every module the image holds (its modules-load.d list, with
//! what modprobe loads beside it: a hostonly image of a root on a plain
//! disk), a cold plug can load nothing more, and the build says so:
//! - systemd: the init-systemd profile's drop-in (`composer.conf`) replaces
//!   systemd's trigger of every object in /sys with one of the devices the
//!   initrd acts on (block devices, network interfaces, input, USB, the
//!   TPM); the trigger of every device with a modalias is a second drop-in,
//!   added here (its name sorts after the profile's, so it adds to the
//!   profile's `ExecStart=` lines) unless the list loads every module. Left
//!   out, it would only have cost the boot its scan of /sys and a run of the
//!   rules over every device (0.14 s to the root of the hostonly systemd
//!   image under emulation).
//! - shell: a marker file, whose presence turns its cold plug rounds off
//!   (each would start a modprobe for the devices' modaliases).

use super::item::Added;
use crate::error::{Error, Result};
use crate::manifest::load::Loaded;
use crate::manifest::node::Pos;

/// Where the systemd drop-in goes: beside the profile's `composer.conf`,
/// after it.
const DROP_IN: &str = "/etc/systemd/system/systemd-udev-trigger.service.d/modaliases.conf";

const DROP_IN_TEXT: &str = "\
# composer: after the devices the initrd acts on (composer.conf), every
# device that has a modalias, so that udev loads the driver of every device
# present. The build leaves this out when the image's /init loads every
# module of the image (its modules-load.d list and their dependencies).
[Service]
ExecStart=-udevadm trigger --type=devices --action=add --attr-match=modalias
";

/// Where the shell init looks for the build's word.
const MARKER: &str = "/usr/lib/composer/list-loads-all";

const MARKER_TEXT: &str = "\
# composer: the modules of /etc/modules-load.d, with what modprobe loads
# beside them, are every module of this image: /init loads them first, and
# its cold plug, which could load nothing more, does not run.
";

/// What the build adds for the image's init: the systemd drop-in unless the
/// load list loads every module the image holds (`list_loads_all`), the
/// shell init's marker when it does.
pub(super) fn add(loaded: &Loaded, list_loads_all: bool) -> Result<Vec<Added>> {
    let (profile, name, dest, text, rule) = if let Some(p) = loaded.profile("init-systemd") {
        if list_loads_all {
            return Ok(Vec::new());
        }
        (
            p,
            "modaliases.conf",
            DROP_IN,
            DROP_IN_TEXT,
            "init-systemd: cold plug of every device with a modalias (the image holds modules its /init does not load)",
        )
    } else if let Some(p) = loaded.profile("init-shell") {
        if !list_loads_all {
            return Ok(Vec::new());
        }
        (
            p,
            "list-loads-all",
            MARKER,
            MARKER_TEXT,
            "init-shell: no cold plug (its /init loads every module of the image first)",
        )
    } else {
        return Ok(Vec::new());
    };
    let at = profile.origin(Pos { line: 1, column: 1 });
    let dir = crate::cache::store_in(
        "coldplug",
        &[(name.to_string(), text.as_bytes().to_vec())],
        &[],
        std::time::UNIX_EPOCH,
    )
    .map_err(|e| {
        Error::at(
            at.clone(),
            format!("cannot write the cold plug's file: {e}"),
        )
        .with_hint("set COMPOSER_CACHE_DIR to a writable directory")
    })?;
    Ok(vec![Added::generated(
        &dir,
        name,
        dest,
        &at.with_rule(rule.to_string()),
    )?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_sorts_after_the_profiles_and_adds_one_trigger() {
        // systemd applies a unit's drop-ins in the order of their names: the
        // profile's resets ExecStart=, this one adds to it.
        let name = DROP_IN.rsplit('/').next().unwrap();
        assert!(name > "composer.conf");
        let execs: Vec<&str> = DROP_IN_TEXT
            .lines()
            .filter(|l| l.starts_with("ExecStart="))
            .collect();
        assert_eq!(
            execs,
            ["ExecStart=-udevadm trigger --type=devices --action=add --attr-match=modalias"]
        );
    }

    #[test]
    fn the_shell_init_looks_for_the_marker_where_it_is_written() {
        let init = include_str!("../../profiles/init/composer-init");
        assert!(
            init.contains(&format!("[ -e {MARKER} ] && coldplug_none=1")),
            "composer-init does not test {MARKER}"
        );
    }
}
