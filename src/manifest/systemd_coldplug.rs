//! The systemd image's cold plug by modalias: the second trigger of
//! `systemd-udev-trigger.service`, added by the build when it can load
//! something.
//!
//! The init-systemd profile's drop-in (`composer.conf`) replaces systemd's
//! trigger of every object in /sys with one of the devices the initrd acts
//! on (block devices, network interfaces, input, USB, the TPM). A second
//! trigger announces every device that has a modalias, so that udev loads
//! the driver of every device present: composer adds it here (a drop-in
//! whose name sorts after the profile's, so that it adds to the profile's
//! `ExecStart=` lines), unless the image's `/init` already loads every
//! module the image holds (a hostonly image whose modules are its load list
//! and what modprobe loads with it). Then udev could load nothing more, and
//! the trigger would only cost the boot its scan of /sys and udev's run of
//! its rules over every device (measured: 0.06 s to the root of the
//! hostonly systemd image under emulation).

use super::item::Added;
use super::load::Loaded;
use super::node::Pos;
use crate::error::{Error, Result};

/// Where the drop-in goes: beside the profile's `composer.conf`, after it.
pub(super) const DEST: &str = "/etc/systemd/system/systemd-udev-trigger.service.d/modaliases.conf";

const TEXT: &str = "\
# composer: after the devices the initrd acts on (composer.conf), every
# device that has a modalias, so that udev loads the driver of every device
# present. The build leaves this out when the image's /init loads every
# module of the image (its modules-load.d list and their dependencies).
[Service]
ExecStart=-udevadm trigger --type=devices --action=add --attr-match=modalias
";

/// The drop-in, for an image with the init-systemd profile whose load list
/// does not load every module it holds (`list_loads_all`).
pub(super) fn add(loaded: &Loaded, list_loads_all: bool) -> Result<Vec<Added>> {
    let Some(profile) = loaded.profile("init-systemd") else {
        return Ok(Vec::new());
    };
    if list_loads_all {
        return Ok(Vec::new());
    }
    let at = profile.origin(Pos { line: 1, column: 1 });
    let name = "modaliases.conf";
    let dir = crate::cache::store_in(
        "systemd-coldplug",
        &[(name.to_string(), TEXT.as_bytes().to_vec())],
        &[],
        std::time::UNIX_EPOCH,
    )
    .map_err(|e| {
        Error::at(
            at.clone(),
            format!("cannot write the cold plug's drop-in: {e}"),
        )
        .with_hint("set COMPOSER_CACHE_DIR to a writable directory")
    })?;
    let origin = at.with_rule(
        "init-systemd: cold plug of every device with a modalias (the image holds modules its /init does not load)"
            .to_string(),
    );
    Ok(vec![Added::generated(&dir, name, DEST, &origin)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_sorts_after_the_profiles_and_adds_one_trigger() {
        // systemd applies a unit's drop-ins in the order of their names: the
        // profile's resets ExecStart=, this one adds to it.
        let name = DEST.rsplit('/').next().unwrap();
        assert!(name > "composer.conf");
        let execs: Vec<&str> = TEXT
            .lines()
            .filter(|l| l.starts_with("ExecStart="))
            .collect();
        assert_eq!(
            execs,
            ["ExecStart=-udevadm trigger --type=devices --action=add --attr-match=modalias"]
        );
    }
}
