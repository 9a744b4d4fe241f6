//! `composer import-list` then `composer build` gives the same archive as
//! building the list directly, for the whole list corpus.

use crate::corpus;
use crate::support;

use std::fs;

#[test]
fn imported_manifests_build_the_same_archive() {
    let fixtures = corpus::fixtures();
    let dir = support::Scratch::new("import-list");
    let mut compared = 0;
    for list in corpus::lists() {
        if list.compat {
            continue; // needs --compat, which manifests do not model
        }
        let manifest = dir.join(format!("{}.toml", list.name));
        let mut cmd = support::composer();
        corpus::apply_env(&mut cmd, fixtures)
            .arg("import-list")
            .arg(&list.path)
            .arg("-o")
            .arg(&manifest);
        support::run_ok(&mut cmd);
        for align in ["0", "4096"] {
            let t = corpus::MTIME.to_string();
            let direct = dir.join(format!("{}.{align}.list.img", list.name));
            let mut cmd = support::composer();
            corpus::apply_env(&mut cmd, fixtures)
                .args(["build", "-t", &t, "-a", align, "--list"])
                .arg(&list.path)
                .arg("-o")
                .arg(&direct);
            support::run_ok(&mut cmd);
            let via = dir.join(format!("{}.{align}.manifest.img", list.name));
            let mut cmd = support::composer();
            cmd.args(["build", "-t", &t, "-a", align])
                .arg(&manifest)
                .arg("-o")
                .arg(&via);
            support::run_ok(&mut cmd);
            let (a, b) = (fs::read(&direct).unwrap(), fs::read(&via).unwrap());
            if a != b {
                let first = a.iter().zip(&b).position(|(x, y)| x != y);
                panic!(
                    "{} (-a {align}): the imported manifest builds a different archive \
                     ({} vs {} bytes, first difference at {first:?}); manifest kept at {}",
                    list.name,
                    a.len(),
                    b.len(),
                    manifest.display()
                );
            }
            compared += 1;
        }
    }
    assert!(compared >= 60, "only {compared} comparisons");
}
