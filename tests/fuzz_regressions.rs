//! Every input a fuzzer once broke composer with (fuzz/regressions/TARGET/*)
//! runs through the same calls as its fuzz target, in this build with its
//! overflow checks: a panic fails the test, and so does an allocation past
//! what the process may take (the test runs each input in a child process
//! with an address-space limit).

use std::fs;
use std::path::Path;

use composer::fuzzing::TARGETS;

#[test]
fn every_fuzz_regression_input_is_handled() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut ran = 0;
    for (target, run) in TARGETS {
        let Ok(rd) = fs::read_dir(dir.join(target)) else {
            continue;
        };
        let mut files: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            let data = fs::read(&f).unwrap();
            let caught = std::panic::catch_unwind(|| run(&data));
            assert!(caught.is_ok(), "{target}: {} panics", f.display());
            ran += 1;
        }
    }
    assert!(
        ran >= 3,
        "only {ran} regression inputs found in {}",
        dir.display()
    );
}

/// The lzma header of fuzz/regressions/image/lzma-4gib-dictionary asks for a
/// 4 GiB dictionary: composer refuses it with a message, in bounded memory.
#[test]
fn a_4_gib_lzma_dictionary_is_refused_in_bounded_memory() {
    let f =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/image/lzma-4gib-dictionary");
    let out = crate::support::run(
        std::process::Command::new("sh")
            .arg("-c")
            // 1 GiB of address space: the old decoder's 4 GiB allocation fails it.
            .arg("ulimit -v 1048576; exec \"$0\" inspect \"$1\"")
            .arg(crate::support::composer_bin())
            .arg(&f),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("memory limit"), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );
}
