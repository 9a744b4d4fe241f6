//! Acceptance: host mode on the machine running the tests selects the
//! modules for its own virtio devices (matched against Debian's kernel's
//! aliases) and explains each choice (`composer why`).

use crate::support;

use std::path::Path;
use std::process::Command;

use composer::resolve::kmod;

#[test]
fn host_mode_takes_the_virtio_drivers_and_says_why() {
    if support::require_tool("modprobe", "kmod").is_none() {
        return;
    }
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(base) = support::debian_kernel_depmod(&kernel) else {
        return;
    };
    let scan =
        kmod::scan_host(Path::new("/sys/devices"), Path::new("/proc/modules")).expect("scan sysfs");
    let virtio: Vec<_> = scan
        .devices
        .iter()
        .filter(|d| d.modalias.starts_with("virtio:") || d.modalias.starts_with("pci:v00001AF4"))
        .collect();
    if virtio.is_empty() {
        support::skip("this machine has no virtio devices");
        return;
    }
    let dir = support::Scratch::new("kmod-host");
    let conf = dir.join("empty-modprobe.d");
    std::fs::create_dir_all(&conf).unwrap();
    let manifest = dir.join("host.toml");
    std::fs::write(
        &manifest,
        format!(
            "root = \"{}\"\n\n[[module]]\nhost = true\n",
            kernel.root.display()
        ),
    )
    .unwrap();
    let why = |target: Option<&str>| -> String {
        let mut cmd = support::composer();
        cmd.arg("why")
            .arg(&manifest)
            .args(["--kver", &kernel.version]);
        if let Some(t) = target {
            cmd.arg(t);
        }
        String::from_utf8_lossy(&support::run_ok(&mut cmd).stdout).into_owned()
    };
    let report = why(None);
    eprintln!("{report}");
    let mut checked = 0;
    for dev in &virtio {
        // What modprobe resolves the device's modalias to, on the same tree.
        let out = support::run_ok(
            Command::new("modprobe")
                .arg("-C")
                .arg(&conf)
                .arg("-d")
                .arg(&base)
                .args(["-S", &kernel.version, "-R", &dev.modalias]),
        );
        let wanted: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        assert!(
            !wanted.is_empty(),
            "modprobe knows no driver for {}",
            dev.modalias
        );
        for m in wanted {
            let explained = why(Some(&m));
            eprintln!("{explained}");
            assert!(
                explained.contains("[[module]] host: device /sys/devices/")
                    && explained.contains("(modalias ")
                    && explained.contains(&format!(" -> {m}")),
                "{m} (for {}) is not explained by a device:\n{explained}",
                dev.modalias
            );
            assert!(
                report
                    .lines()
                    .any(|l| l.contains(&format!("  {m}  ")) || l.contains(&format!("  {m} +"))),
                "host mode did not select {m} for {}:\n{report}",
                dev.modalias
            );
            checked += 1;
        }
    }
    let blk = why(Some("virtio_blk"));
    if virtio
        .iter()
        .any(|d| d.modalias.starts_with("virtio:d00000002"))
    {
        assert!(
            blk.contains("virtio:d00000002v"),
            "virtio_blk not matched to the block device:\n{blk}"
        );
    }
    eprintln!(
        "{checked} drivers for {} virtio devices selected and explained",
        virtio.len()
    );
}
