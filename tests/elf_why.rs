//! `composer deps` prints what a program needs; `composer why PATH
//! MANIFEST` shows every chain that brought a library into the image.

use crate::support;

use std::fs;

#[test]
fn deps_and_why_name_the_chain() {
    let deps = support::run_ok(support::composer().args(["deps", "ls"]));
    let deps = String::from_utf8(deps.stdout).unwrap();
    let libc = deps
        .lines()
        .find(|l| l.contains("/libc.so"))
        .unwrap_or_else(|| panic!("no libc in `composer deps ls`:\n{deps}"))
        .to_string();
    assert!(deps.lines().any(|l| l.ends_with("/ls")), "{deps}");

    let dir = support::Scratch::new("elf-why");
    let manifest = dir.join("m.toml");
    fs::write(&manifest, "binaries = [\"ls\", \"cat\"]\n").unwrap();
    let out = support::run_ok(support::composer().arg("why").arg(&libc).arg(&manifest));
    let text = String::from_utf8(out.stdout).unwrap();
    for want in ["m.toml:1:", "binary ls", "NEEDED libc.so", "cat ("] {
        assert!(text.contains(want), "`{want}` missing from:\n{text}");
    }
    // The other order works too.
    let again = support::run_ok(support::composer().arg("why").arg(&manifest).arg(&libc));
    assert_eq!(again.stdout, text.as_bytes());
    // A path the image does not have is an error.
    let missing = support::run(
        support::composer()
            .arg("why")
            .arg("/no/such/file")
            .arg(&manifest),
    );
    assert!(!missing.status.success());
}
