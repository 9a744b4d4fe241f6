//! Malformed inputs: every one must fail cleanly.
//!
//! Each case of the table runs through both front ends (`composer build --list` and
//! `composer gen-init-cpio`) and must:
//!
//! - exit non-zero, print nothing on stdout and `composer: error:` on stderr;
//! - for a mistake in the list, name it as `LIST:LINE:COL:` (the column where it
//!   points at something specific, else at least `LIST:LINE:`);
//! - leave an existing output file byte for byte as it was, create nothing new in the
//!   output directory, and leave no temporary file (`.composer-*`) anywhere, also when
//!   the failure comes while the archive is being written (a source that reads shorter
//!   than it stats).
//!
//! The kernel tool's traps that strict mode refuses (a trailing `# note` on a file line,
//! an indented `#` line) are accepted with `--compat`, read as gen_init_cpio reads them.

use crate::support;

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::Scratch;

/// What the output directory holds before every run: an archive from an earlier build.
const OUT_NAME: &str = "initrd.img";

fn previous_archive() -> Vec<u8> {
    let mut bytes = b"070701 an earlier archive that must survive a failed build\n".to_vec();
    bytes.extend((0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8));
    bytes
}

/// Where `-o` points.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    /// `out/initrd.img`, which exists (and must be left alone).
    Existing,
    /// `out/missing/initrd.img`: the directory does not exist (and must not appear).
    MissingDir,
    /// `out/adir`: an existing (empty) directory.
    Directory,
}

struct Case {
    name: &'static str,
    /// The list; relative source paths are relative to the scratch directory (the
    /// working directory of the run), so columns do not depend on where that is.
    list: Vec<u8>,
    /// Options placed before the list/output arguments.
    args: Vec<&'static str>,
    /// (line, column) the error must name in the list; `None` for errors that are not
    /// about the list (a bad option, a bad output path).
    at: Option<(u32, Option<u32>)>,
    /// Do not check where the error is reported (only that it is reported).
    any_position: bool,
    /// A piece of the message that says what is wrong.
    says: &'static str,
    target: Target,
    /// Extra preparation in the scratch directory.
    setup: Option<fn(&Path)>,
}

fn case(name: &'static str, list: impl Into<Vec<u8>>) -> Case {
    Case {
        name,
        list: list.into(),
        args: Vec::new(),
        at: None,
        any_position: false,
        says: "",
        target: Target::Existing,
        setup: None,
    }
}

impl Case {
    fn at(mut self, line: u32, column: u32) -> Case {
        self.at = Some((line, Some(column)));
        self
    }
    fn line(mut self, line: u32) -> Case {
        self.at = Some((line, None));
        self
    }
    fn anywhere(mut self) -> Case {
        self.any_position = true;
        self
    }
    fn args(mut self, args: &[&'static str]) -> Case {
        self.args = args.to_vec();
        self
    }
    fn says(mut self, text: &'static str) -> Case {
        self.says = text;
        self
    }
    fn target(mut self, target: Target) -> Case {
        self.target = target;
        self
    }
    fn setup(mut self, f: fn(&Path)) -> Case {
        self.setup = Some(f);
        self
    }
}

/// A list that is fine up to its last line, which is `last`: errors must name line 4.
fn after_good_lines(last: &str) -> Vec<u8> {
    format!("# a comment\ndir /a 0755 0 0\nfile /a/hello src/hello.txt 0644 0 0\n{last}\n")
        .into_bytes()
}

fn sparse_4gib(dir: &Path) {
    let f = fs::File::create(dir.join("src/huge.img")).unwrap();
    // Sparse: takes no disk space.
    f.set_len(4 << 30).unwrap();
}

fn cases() -> Vec<Case> {
    let long_name = "n".repeat(4096);
    let long_target = "t".repeat(4096);
    let mut cases = vec![
        case(
            "unknown type",
            after_good_lines("fiel /a/b src/hello.txt 0644 0 0"),
        )
        .at(4, 1)
        .says("unknown entry type `fiel`"),
        case(
            "unknown type, no guess",
            after_good_lines("hardlink /a/b /a/hello"),
        )
        .at(4, 1)
        .says("unknown entry type"),
        case("missing gid", after_good_lines("dir /b 0755 0"))
            .at(4, 14)
            .says("missing <gid>"),
        case(
            "missing everything after the type",
            after_good_lines("slink"),
        )
        .at(4, 6)
        .says("missing <name>"),
        case(
            "missing device numbers",
            after_good_lines("nod /a/null 0666 0 0 c"),
        )
        .at(4, 23)
        .says("missing <maj>"),
        case("mode not octal", after_good_lines("dir /b 0789 0 0"))
            .at(4, 8)
            .says("not an octal number"),
        case(
            "mode not a number",
            after_good_lines("dir /b rwxr-xr-x 0 0"),
        )
        .at(4, 8)
        .says("not an octal number"),
        case("mode with type bits", after_good_lines("dir /b 040755 0 0"))
            .at(4, 8)
            .says("beyond 07777"),
        case(
            "uid out of range",
            after_good_lines("dir /b 0755 4294967296 0"),
        )
        .at(4, 13)
        .says("out of range"),
        case("gid not a number", after_good_lines("dir /b 0755 0 wheel"))
            .at(4, 15)
            .says("gid `wheel` is not a decimal number"),
        case(
            "bad device type",
            after_good_lines("nod /a/null 0666 0 0 x 1 3"),
        )
        .at(4, 22)
        .says("device type `x`"),
        case(
            "major not a number",
            after_good_lines("nod /a/null 0666 0 0 c one 3"),
        )
        .at(4, 24)
        .says("major number `one`"),
        case(
            "missing source file",
            after_good_lines("file /a/gone src/does-not-exist 0644 0 0"),
        )
        .line(4)
        .says("does not exist"),
        case(
            "directory as file source",
            after_good_lines("file /a/dir src 0644 0 0"),
        )
        .line(4)
        .says("is a directory"),
        case(
            "sparse file of 4 GiB",
            after_good_lines("file /a/huge src/huge.img 0644 0 0"),
        )
        .line(4)
        .says("4 GiB")
        .setup(sparse_4gib),
        case(
            "name of 4096 bytes",
            after_good_lines(&format!("dir /{long_name} 0755 0 0")),
        )
        .at(4, 5)
        .says("name of 4096 bytes"),
        case(
            "hardlink name of 4096 bytes",
            after_good_lines(&format!("file /a/x src/hello.txt 0644 0 0 /{long_name}")),
        )
        .at(4, 34)
        .says("name of 4096 bytes"),
        case(
            "symlink target of 4096 bytes",
            after_good_lines(&format!("slink /a/l {long_target} 0777 0 0")),
        )
        .at(4, 12)
        .says("symlink target of 4096 bytes"),
        case(
            "trailing comment on a file line",
            after_good_lines("file /a/x src/hello.txt 0644 0 0 # the x file"),
        )
        .at(4, 34)
        .says("not a comment"),
        case(
            "trailing comment on a dir line",
            after_good_lines("dir /b 0755 0 0 # note"),
        )
        .at(4, 17)
        .says("not a comment"),
        case("indented comment", after_good_lines("  # indented note"))
            .at(4, 3)
            .says("indented comment"),
        case("indented entry", after_good_lines("\tdir /b 0755 0 0"))
            .at(4, 1)
            .says("indented line"),
        case(
            "unset variable in a location",
            after_good_lines("file /a/x src/${COMPOSER_TEST_SURELY_UNSET_VAR}.txt 0644 0 0"),
        )
        .at(4, 15)
        .says("COMPOSER_TEST_SURELY_UNSET_VAR"),
        case(
            "duplicate name",
            after_good_lines("file /a/hello src/hello.txt 0600 0 0"),
        )
        .line(4)
        .says("already in the archive (line 3)"),
        case(
            "dir and file of the same name",
            after_good_lines("dir /a/hello 0755 0 0"),
        )
        .line(4)
        .says("already in the archive (line 3)"),
        case("`..` component", after_good_lines("dir /a/../etc 0755 0 0"))
            .at(4, 5)
            .says("`..` component"),
        case(
            "`..` hardlink",
            after_good_lines("file /a/x src/hello.txt 0644 0 0 ../x"),
        )
        .at(4, 34)
        .says("`..` component"),
        case("NUL byte in a name", after_good_lines("dir /b\0c 0755 0 0"))
            .at(4, 7)
            .says("NUL byte"),
        case(
            "NUL byte after the fields",
            after_good_lines("dir /b 0755 0 0 \0"),
        )
        .at(4, 17)
        .says("NUL byte"),
        case("empty name", after_good_lines("dir / 0755 0 0"))
            .at(4, 5)
            .says("empty name"),
        // Line numbers are the file's lines in --compat too, even after a line longer
        // than the kernel tool's line buffer (which it reads in several pieces).
        case(
            "compat: line after a very long line",
            format!("dir /a 0755 0 0 {}\ndir /b 0755 0\n", "x".repeat(9000)),
        )
        .args(&["--compat"])
        .at(2, 1)
        .says("unrecognized dir format"),
        case(
            "compat: a line the kernel tool rejects",
            after_good_lines("dir /b 0755 0"),
        )
        .args(&["--compat"])
        .line(4)
        .says("unrecognized dir format"),
        // Options and output paths: no list position.
        case("-a 3000 (not a power of two)", after_good_lines(""))
            .args(&["-a", "3000"])
            .says("not a power of two"),
        case("-a 12 (not a power of two)", after_good_lines(""))
            .args(&["-a", "12"])
            .says("not a power of two"),
        case("-a not a number", after_good_lines(""))
            .args(&["-a", "4k"])
            .says("invalid alignment"),
        case("-t -1", after_good_lines(""))
            .args(&["-t", "-1"])
            .says("out of range"),
        case("-t 4294967296", after_good_lines(""))
            .args(&["-t", "4294967296"])
            .says("out of range"),
        case("-t not a number", after_good_lines(""))
            .args(&["-t", "yesterday"])
            .says("invalid timestamp"),
        case("output directory missing", after_good_lines(""))
            .target(Target::MissingDir)
            .says("does not exist"),
        case("output is a directory", after_good_lines(""))
            .target(Target::Directory)
            .says("is a directory"),
    ];
    // A source that fails while the archive is being written, after the temporary
    // file exists: sysfs attributes stat as 4096 bytes but read much shorter.
    let sysfs = "/sys/kernel/uevent_seqnum";
    if Path::new(sysfs).is_file() {
        cases.push(
            case(
                "source shorter than its stat",
                after_good_lines(&format!("file /a/seqnum {sysfs} 0444 0 0")),
            )
            .anywhere()
            .says("shorter"),
        );
    } else {
        eprintln!("note: {sysfs} missing, the mid-write failure case is not run");
    }
    cases
}

#[derive(Clone, Copy, Debug)]
enum Front {
    Build,
    GenInitCpio,
}

fn command(front: Front, args: &[&str], list: &Path, out: &Path) -> Command {
    let mut cmd = support::composer();
    match front {
        Front::Build => {
            cmd.arg("build")
                .args(args)
                .arg("--list")
                .arg(list)
                .arg("-o")
                .arg(out);
        }
        Front::GenInitCpio => {
            cmd.arg("gen-init-cpio")
                .args(args)
                .arg("-o")
                .arg(out)
                .arg(list);
        }
    }
    cmd
}

/// Every path under `dir` whose name starts with `.composer-`.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_name().as_bytes().starts_with(b".composer-") {
                found.push(p.clone());
            }
            if e.file_type().unwrap().is_dir() {
                todo.push(p);
            }
        }
    }
    found
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs one case through one front end; returns what went wrong, if anything.
fn check(case: &Case, front: Front) -> Result<(), String> {
    let dir = Scratch::new(&format!("malformed-{}", case.name));
    fs::create_dir(dir.join("src")).unwrap();
    fs::write(dir.join("src/hello.txt"), "hello\n").unwrap();
    fs::create_dir(dir.join("out")).unwrap();
    let previous = previous_archive();
    fs::write(dir.join("out").join(OUT_NAME), &previous).unwrap();
    if case.target == Target::Directory {
        fs::create_dir(dir.join("out/adir")).unwrap();
    }
    if let Some(setup) = case.setup {
        setup(&dir);
    }
    let before = names_in(&dir.join("out"));
    let list = dir.join("case.list");
    fs::write(&list, &case.list).unwrap();
    let out = match case.target {
        Target::Existing => dir.join("out").join(OUT_NAME),
        Target::MissingDir => dir.join("out/missing").join(OUT_NAME),
        Target::Directory => dir.join("out/adir"),
    };

    let mut cmd = command(front, &case.args, &list, &out);
    cmd.current_dir(&dir);
    let output: Output = support::run(&mut cmd);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let mut problems = Vec::new();

    if output.status.success() {
        problems.push("exited 0".to_string());
    } else if output.status.code() != Some(2) {
        problems.push(format!("exited with {} (want 2)", output.status));
    }
    if !output.stdout.is_empty() {
        problems.push(format!("wrote {} bytes to stdout", output.stdout.len()));
    }
    if !stderr.starts_with("composer: error: ") {
        problems.push("stderr does not start with `composer: error: `".into());
    }
    if !stderr.contains(case.says) {
        problems.push(format!("stderr does not say `{}`", case.says));
    }
    let list_shown = list.display().to_string();
    match case.at {
        _ if case.any_position => {}
        Some((line, column)) => {
            let want = match column {
                Some(c) => format!("composer: error: {list_shown}:{line}:{c}: "),
                None => format!("composer: error: {list_shown}:{line}:"),
            };
            if !stderr.contains(&want) {
                problems.push(format!("stderr does not contain `{want}`"));
            }
        }
        None => {
            if stderr.contains(&format!("{list_shown}:")) {
                problems.push("an option error is reported at a list position".into());
            }
        }
    }

    match fs::read(dir.join("out").join(OUT_NAME)) {
        Ok(now) if now == previous => {}
        Ok(now) => problems.push(format!(
            "the existing output changed ({} bytes, was {})",
            now.len(),
            previous.len()
        )),
        Err(e) => problems.push(format!("the existing output is gone: {e}")),
    }
    let after = names_in(&dir.join("out"));
    if after != before {
        problems.push(format!("output directory was {before:?}, now {after:?}"));
    }
    if case.target == Target::Directory && !names_in(&dir.join("out/adir")).is_empty() {
        problems.push("something was written into the output directory given as -o".into());
    }
    let temps = temp_files(&dir);
    if !temps.is_empty() {
        problems.push(format!("temporary files left behind: {temps:?}"));
    }

    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} [{front:?} {:?}]: {}\n    stderr: {}",
            case.name,
            case.args,
            problems.join("; "),
            stderr.trim_end().replace('\n', "\n            ")
        ))
    }
}

#[test]
fn malformed_inputs_fail_cleanly() {
    let cases = cases();
    assert!(cases.len() >= 18);
    let mut failures = Vec::new();
    for case in &cases {
        for front in [Front::Build, Front::GenInitCpio] {
            if let Err(e) = check(case, front) {
                failures.push(e);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs misbehaved:\n  {}",
        failures.len(),
        cases.len() * 2,
        failures.join("\n  ")
    );
}

/// A missing list file is an error without a line (there is no line), and the output
/// is left alone.
#[test]
fn missing_list_file() {
    let dir = Scratch::new("malformed-missing-list");
    let out = dir.join(OUT_NAME);
    fs::write(&out, previous_archive()).unwrap();
    for front in [Front::Build, Front::GenInitCpio] {
        let output = support::run(&mut command(front, &[], &dir.join("nope.list"), &out));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{front:?}: {stderr}");
        assert!(stderr.starts_with("composer: error: "), "{stderr}");
        assert!(stderr.contains("nope.list"), "{stderr}");
        assert_eq!(fs::read(&out).unwrap(), previous_archive());
        assert!(temp_files(&dir).is_empty());
    }
}

// ---------------------------------------------------------------------------------------
// --compat accepts what gen_init_cpio accepts
// ---------------------------------------------------------------------------------------

const TRAILING_COMMENT: &str = "dir /a 0755 0 0\nfile /a/x src/hello.txt 0644 0 0 # note\n";
const INDENTED_COMMENT: &str = "dir /a 0755 0 0\n  # indented note\ndir /b 0755 0 0\n";

/// Builds `list` with `--compat` (both front ends, `-t 0`) over an existing output; the
/// build must succeed and replace the output. Returns the archive and stderr.
fn compat_build(name: &str, list: &str) -> (Vec<u8>, String) {
    let dir = Scratch::new(name);
    fs::create_dir(dir.join("src")).unwrap();
    fs::write(dir.join("src/hello.txt"), "hello\n").unwrap();
    let list_path = dir.join("case.list");
    fs::write(&list_path, list).unwrap();
    let out = dir.join(OUT_NAME);
    let mut results = Vec::new();
    for front in [Front::Build, Front::GenInitCpio] {
        fs::write(&out, previous_archive()).unwrap();
        let mut cmd = command(front, &["--compat", "-t", "0"], &list_path, &out);
        let output = support::run_ok(cmd.current_dir(&dir));
        assert!(
            temp_files(&dir).is_empty(),
            "{front:?}: temporary file left"
        );
        let archive = fs::read(&out).unwrap();
        assert_ne!(
            archive,
            previous_archive(),
            "{front:?}: output not replaced"
        );
        results.push((
            archive,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ));
    }
    assert_eq!(results[0].0, results[1].0, "build and gen-init-cpio differ");
    results.swap_remove(0)
}

fn names(archive: &[u8]) -> Vec<String> {
    support::parse_newc(archive)
        .unwrap()
        .iter()
        .map(|e| e.name_str())
        .collect()
}

#[test]
fn compat_accepts_trailing_comment_as_hardlinks() {
    let (archive, _) = compat_build("malformed-compat-trailing", TRAILING_COMMENT);
    let entries = support::parse_newc(&archive).unwrap();
    assert_eq!(
        names(&archive),
        ["a", "a/x", "#", "note", "TRAILER!!!"],
        "gen_init_cpio makes hardlinks named `#` and `note`"
    );
    // One inode, three names, the data on the last one.
    let links = &entries[1..4];
    assert!(links.iter().all(|e| e.ino == links[0].ino && e.nlink == 3));
    assert_eq!(links[2].data, b"hello\n");
}

#[test]
fn compat_accepts_indented_comment_with_a_warning() {
    let (archive, stderr) = compat_build("malformed-compat-indented", INDENTED_COMMENT);
    assert_eq!(names(&archive), ["a", "b", "TRAILER!!!"]);
    assert!(
        stderr.contains("composer: warning:") && stderr.contains("case.list:2:"),
        "the skipped line is reported: {stderr}"
    );
}

/// The --compat archives are the kernel tool's own bytes.
#[test]
fn compat_matches_kernel_tool_on_the_traps() {
    let Some(gen) = support::kernel_gen_init_cpio() else {
        return;
    };
    for (name, list) in [
        ("trailing", TRAILING_COMMENT),
        ("indented", INDENTED_COMMENT),
    ] {
        let (ours, _) = compat_build(&format!("malformed-oracle-{name}"), list);
        let dir = Scratch::new(&format!("malformed-oracle-kernel-{name}"));
        fs::create_dir(dir.join("src")).unwrap();
        fs::write(dir.join("src/hello.txt"), "hello\n").unwrap();
        fs::write(dir.join("case.list"), list).unwrap();
        let out = support::run(
            Command::new(&gen)
                .args(["-t", "0", "case.list"])
                .current_dir(&dir),
        );
        assert!(out.status.success(), "gen_init_cpio failed on {name}");
        assert!(
            ours == out.stdout,
            "{name}: composer --compat differs from gen_init_cpio"
        );
    }
}
