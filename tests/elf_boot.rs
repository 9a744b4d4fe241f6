//! An image of the host's own bash and tools, with exactly the libraries
//! composer resolved for them (no busybox), boots Debian's kernel: bash is
//! /init and runs the tools.

use crate::support;

use std::fs;

#[test]
fn bash_as_init_boots_with_resolved_libraries() {
    let Some(_qemu) = support::require_qemu() else {
        return;
    };
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = support::Scratch::new("elf-boot");
    fs::write(
        dir.join("init"),
        "#!/bin/bash\n\
         mount -t proc proc /proc\n\
         echo \"files: $(ls /usr/bin | tr '\\n' ' ')\"\n\
         cat /etc/marker\n\
         echo o > /proc/sysrq-trigger\n",
    )
    .unwrap();
    fs::write(dir.join("marker"), "COMPOSER-ELF-BOOT-OK\n").unwrap();
    fs::write(
        dir.join("initrd.toml"),
        r#"
binaries = ["bash", "ls", "mount", "cat", "tr"]

[[symlink]]
path = "/bin"
target = "usr/bin"

[[file]]
src = "init"
dst = "/init"
mode = "0755"

[[file]]
src = "marker"
dst = "/etc/marker"

[[dir]]
path = "/proc"

[[dir]]
path = "/dev"

[[node]]
path = "/dev/console"
type = "char"
major = 5
minor = 1
"#,
    )
    .unwrap();
    let img = dir.join("initrd.img");
    support::run_ok(
        support::composer()
            .arg("build")
            .arg(dir.join("initrd.toml"))
            .arg("-o")
            .arg(&img),
    );
    let bytes = fs::read(&img).unwrap();
    let entries = support::parse_newc(&bytes).unwrap();
    let names: Vec<String> = entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.contains("busybox")),
        "no busybox expected: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.contains("libc.so")),
        "libc was not resolved: {names:?}"
    );
    let boot = support::qemu_boot_with(&kernel, &img, &support::BootOptions::default());
    assert!(
        boot.console.contains("COMPOSER-ELF-BOOT-OK") && boot.console.contains("bash"),
        "bash as /init did not run:\n{}",
        boot.console
    );
}
