//! Bad manifests: every one makes `composer build` (and `composer check`)
//! fail with `composer: error: FILE:LINE:COLUMN: message`, pointing at the
//! culprit, with a did-you-mean hint for misspelt keys, and without leaving
//! an output file or a temporary file behind.
//!
//! Each case is a few small manifests written into a scratch directory; the
//! sources they name live in a small fake root passed with `--root`, so no
//! case depends on the host's files. Lines and columns are 1-based; columns
//! count characters, and a quoted value's column is that of its opening
//! quote.

use crate::support;

use std::fs;
use std::path::Path;

struct Case {
    name: &'static str,
    /// (path relative to the manifest directory, text); the first is built.
    files: &'static [(&'static str, &'static str)],
    /// The file, line and column the error must name; `None` for errors
    /// that are not about one place in a manifest.
    at: Option<(&'static str, u32, u32)>,
    /// Phrases the message must contain; `{dir}` stands for the manifest
    /// directory.
    says: &'static [&'static str],
    /// The hint line must contain this.
    hint: Option<&'static str>,
}

const fn case(
    name: &'static str,
    files: &'static [(&'static str, &'static str)],
    at: (&'static str, u32, u32),
    says: &'static [&'static str],
) -> Case {
    Case {
        name,
        files,
        at: Some(at),
        says,
        hint: None,
    }
}

impl Case {
    const fn hint(mut self, hint: &'static str) -> Case {
        self.hint = Some(hint);
        self
    }
}

const CASES: &[Case] = &[
    // --- keys -------------------------------------------------------------
    case(
        "unknown top-level key (TOML)",
        &[(
            "a.toml",
            r#"# A rescue image.
[[fiel]]
src = "/etc/hostname"
"#,
        )],
        ("a.toml", 2, 3),
        &["unknown key `fiel`"],
    )
    .hint("did you mean `file`?"),
    case(
        "unknown top-level key (YAML)",
        &[(
            "a.yaml",
            r#"# A rescue image.
fiel:
  - src: /etc/hostname
"#,
        )],
        ("a.yaml", 2, 1),
        &["unknown key `fiel`"],
    )
    .hint("did you mean `file`?"),
    case(
        "unknown key in [[file]] (TOML)",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc/hostname"
dts = "/etc/name"
"#,
        )],
        ("a.toml", 3, 1),
        &["unknown key `dts`"],
    )
    .hint("did you mean `dst`?"),
    case(
        "unknown key in a file rule (YAML)",
        &[(
            "a.yaml",
            r#"file:
  - src: /etc/hostname
    dts: /etc/name
"#,
        )],
        ("a.yaml", 3, 5),
        &["unknown key `dts`"],
    )
    .hint("did you mean `dst`?"),
    case(
        "misspelt key in [defaults]",
        &[(
            "a.toml",
            r#"[defaults]
uid = 0
dir_mod = "0700"
"#,
        )],
        ("a.toml", 3, 1),
        &["unknown key `dir_mod`"],
    )
    .hint("did you mean `dir_mode`?"),
    case(
        "misspelt key in a drop-in names the drop-in",
        &[
            ("a.toml", "dropins = \"a.d\"\n"),
            (
                "a.d/10-data.toml",
                r#"[[dir]]
path = "/data"
mod = "0700"
"#,
            ),
        ],
        ("a.d/10-data.toml", 3, 1),
        &["unknown key `mod`"],
    )
    .hint("did you mean `mode`?"),
    // --- types and values ----------------------------------------------
    case(
        "mode as an integer (TOML)",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc/hostname"
mode = 755
"#,
        )],
        ("a.toml", 3, 8),
        &["mode 755 is a number", "octal strings"],
    ),
    case(
        "mode as an integer (YAML)",
        &[(
            "a.yaml",
            r#"file:
  - src: /etc/hostname
    mode: 755
"#,
        )],
        ("a.yaml", 3, 11),
        &["mode 755 is a number", "octal strings"],
    ),
    case(
        "uid as a string (TOML)",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc/hostname"
uid = "root"
"#,
        )],
        ("a.toml", 3, 7),
        &["invalid type: string \"root\""],
    ),
    case(
        "uid as a string (YAML wrong type)",
        &[(
            "a.yaml",
            r#"file:
  - src: /etc/hostname
    uid: root
"#,
        )],
        ("a.yaml", 3, 10),
        &["invalid type: string \"root\""],
    ),
    case(
        "bad octal mode string",
        &[(
            "a.toml",
            r#"[[dir]]
path = "/data"
mode = "0789"
"#,
        )],
        ("a.toml", 3, 8),
        &["mode `0789` is not an octal permission string"],
    ),
    case(
        "mode above 07777 (TOML)",
        &[(
            "a.toml",
            r#"[[dir]]
path = "/data"
mode = "10000"
"#,
        )],
        ("a.toml", 3, 8),
        &["mode `10000` is not an octal permission string"],
    ),
    case(
        "mode above 07777 (YAML flow mapping)",
        &[(
            "a.yaml",
            r#"dir:
  - {path: /data, mode: "17777"}
"#,
        )],
        ("a.yaml", 2, 25),
        &["mode `17777` is not an octal permission string"],
    ),
    case(
        "bad node type",
        &[(
            "a.toml",
            r#"[[node]]
path = "/dev/fifo"
type = "pipe"
major = 0
minor = 0
"#,
        )],
        ("a.toml", 3, 8),
        &["unknown value `pipe`"],
    )
    .hint("char, block"),
    case(
        "alignment not a power of two",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc/hostname"
align = 3000
"#,
        )],
        ("a.toml", 3, 9),
        &["alignment 3000 is not a power of two"],
    ),
    case(
        "unknown enum value",
        &[(
            "a.toml",
            r#"[image]
order = "random"
"#,
        )],
        ("a.toml", 2, 9),
        &["unknown value `random`"],
    )
    .hint("sorted, manifest"),
    case(
        "misspelt enum value (YAML)",
        &[(
            "a.yaml",
            r#"image:
  order: manifets
"#,
        )],
        ("a.yaml", 2, 10),
        &["unknown value `manifets`"],
    )
    .hint("did you mean `manifest`?"),
    case(
        "mtime out of range (TOML)",
        &[(
            "a.toml",
            r#"[defaults]
mtime = 4294967296
"#,
        )],
        ("a.toml", 2, 9),
        &["mtime 4294967296 does not fit"],
    ),
    case(
        "negative mtime (YAML)",
        &[(
            "a.yaml",
            r#"defaults:
  mtime: -1
"#,
        )],
        ("a.yaml", 2, 10),
        &["mtime -1 does not fit"],
    ),
    // --- required keys ---------------------------------------------------
    case(
        "missing src in [[file]] (TOML)",
        &[(
            "a.toml",
            r#"# Only a destination.
[[file]]
dst = "/etc/hostname"
mode = "0644"
"#,
        )],
        ("a.toml", 2, 1),
        &["missing key `src`"],
    ),
    case(
        "missing src in a file rule (YAML)",
        &[(
            "a.yaml",
            r#"file:
  - dst: /etc/hostname
    mode: "0644"
"#,
        )],
        ("a.yaml", 2, 5),
        &["missing key `src`"],
    ),
    case(
        "missing target in [[symlink]]",
        &[(
            "a.toml",
            r#"[[symlink]]
path = "/sbin"
target = "usr/bin"

[[symlink]]
path = "/bin"
"#,
        )],
        ("a.toml", 5, 1),
        &["missing key `target`"],
    ),
    // --- sources -----------------------------------------------------------
    case(
        "missing source file",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc/hostname"

[[file]]
src = "/etc/missing.conf"
"#,
        )],
        ("a.toml", 5, 7),
        &["source `/etc/missing.conf` cannot be read"],
    ),
    case(
        "missing source beside the manifest (YAML)",
        &[(
            "a.yaml",
            r#"file:
  - src: files/init
    dst: /init
"#,
        )],
        ("a.yaml", 2, 10),
        &["source `files/init` cannot be read"],
    ),
    case(
        "source is a directory",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc"
dst = "/etc2"
"#,
        )],
        ("a.toml", 2, 7),
        &["source `/etc` is not a regular file"],
    )
    .hint("[[tree]]"),
    case(
        "tree source is a file",
        &[(
            "a.toml",
            r#"[[tree]]
src = "/etc/hostname"
dst = "/"
"#,
        )],
        ("a.toml", 2, 7),
        &["tree source `/etc/hostname` is not a directory"],
    ),
    // --- destinations --------------------------------------------------------
    case(
        "conflicting destinations",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc/hostname"
dst = "/etc/name"

[[file]]
src = "/etc/passwd"
dst = "/etc/name"
"#,
        )],
        ("a.toml", 5, 1),
        &[
            "`/etc/name` is declared twice",
            "at {dir}/a.toml:1:1 as file from",
            "/etc/passwd",
            "/etc/hostname",
        ],
    ),
    case(
        "conflicting destinations across an include",
        &[
            (
                "a.toml",
                r#"include = ["base.toml"]

[[file]]
src = "/etc/passwd"
dst = "/etc/name"
"#,
            ),
            (
                "base.toml",
                r#"# The base.
[[file]]
src = "/etc/hostname"
dst = "/etc/name"
"#,
            ),
        ],
        ("a.toml", 3, 1),
        &[
            "`/etc/name` is declared twice",
            "at {dir}/base.toml:2:1 as file from",
        ],
    ),
    case(
        "file and symlink at the same path (TOML)",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc/hostname"
dst = "/etc/name"

[[symlink]]
path = "/etc/name"
target = "hostname"
"#,
        )],
        ("a.toml", 5, 1),
        &[
            "`/etc/name` is declared twice",
            "symlink to `hostname`",
            "at {dir}/a.toml:1:1 as file from",
        ],
    ),
    case(
        "file and symlink at the same path (YAML)",
        &[(
            "a.yaml",
            r#"file:
  - src: /etc/hostname
    dst: /etc/name
symlink:
  - path: /etc/name
    target: hostname
"#,
        )],
        ("a.yaml", 5, 5),
        &[
            "`/etc/name` is declared twice",
            "at {dir}/a.yaml:2:5 as file from",
        ],
    ),
    case(
        "destination escaping the root (TOML)",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc/hostname"
dst = "/etc/../../hostname"
"#,
        )],
        ("a.toml", 3, 7),
        &["`/etc/../../hostname` leaves the image root with `..`"],
    ),
    case(
        "symlink path escaping the root (YAML)",
        &[(
            "a.yaml",
            r#"symlink:
  - path: ../bin
    target: usr/bin
"#,
        )],
        ("a.yaml", 2, 11),
        &["`../bin` leaves the image root"],
    ),
    case(
        "hardlink to a path not in the image",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc/hostname"

[[hardlink]]
path = "/etc/name"
target = "/etc/hostnme"
"#,
        )],
        ("a.toml", 6, 10),
        &["hardlink target `/etc/hostnme` is not a file in the image"],
    ),
    // --- includes ------------------------------------------------------------
    case(
        "cyclic include",
        &[
            ("a.toml", "include = [\"b.toml\"]\n"),
            ("b.toml", "# b comes back to a.\ninclude = [\"a.toml\"]\n"),
        ],
        ("b.toml", 2, 12),
        &["include cycle", "a.toml -> {dir}/b.toml -> {dir}/a.toml"],
    ),
    case(
        "include of a missing file (TOML)",
        &[(
            "a.toml",
            r#"# The base is missing.
include = ["common/base.toml"]
"#,
        )],
        ("a.toml", 2, 12),
        &["cannot read the manifest `{dir}/common/base.toml`"],
    ),
    case(
        "include of a missing file (YAML)",
        &[(
            "a.yaml",
            r#"include:
  - base.yaml
"#,
        )],
        ("a.yaml", 2, 5),
        &["cannot read the manifest `{dir}/base.yaml`"],
    ),
    // --- globs -----------------------------------------------------------------
    case(
        "bad glob",
        &[(
            "a.toml",
            r#"[[glob]]
patterns = ["/etc/hostname", "/usr/["]
"#,
        )],
        ("a.toml", 2, 30),
        &["bad glob `/usr/[`"],
    ),
    case(
        "glob that matches nothing",
        &[(
            "a.toml",
            r#"[[glob]]
patterns = ["/etc/*.zzz"]
"#,
        )],
        ("a.toml", 2, 13),
        &["glob `/etc/*.zzz` matched nothing"],
    )
    .hint("optional = true"),
    case(
        "relative glob",
        &[(
            "a.toml",
            r#"[[glob]]
patterns = ["etc/*"]
"#,
        )],
        ("a.toml", 2, 13),
        &["glob `etc/*` is not absolute"],
    ),
    // --- variables ---------------------------------------------------------------
    case(
        "unknown variable (TOML)",
        &[(
            "a.toml",
            r#"[vars]
flavour = "generic"

[[file]]
src = "/etc/hostname"
dst = "/etc/${flavour}/${nope}.conf"
"#,
        )],
        ("a.toml", 6, 24),
        &["unknown variable `${nope}`"],
    )
    .hint("--set nope=VALUE"),
    case(
        "unknown variable in a plain YAML scalar",
        &[(
            "a.yaml",
            r#"vars:
  flavour: generic
file:
  - src: /etc/hostname
    dst: /etc/${flavour}/${nope}.conf
"#,
        )],
        ("a.yaml", 5, 26),
        &["unknown variable `${nope}`"],
    ),
    case(
        "misspelt variable",
        &[(
            "a.toml",
            r#"[[dir]]
path = '/usr/lib/modules/${kvre}'
"#,
        )],
        ("a.toml", 2, 26),
        &["unknown variable `${kvre}`"],
    )
    .hint("did you mean `${kver}`?"),
    // --- syntax ------------------------------------------------------------------
    case(
        "TOML syntax error",
        &[(
            "a.toml",
            r#"[[file]]
src = "/etc/hostname"
dst = /etc/name
"#,
        )],
        ("a.toml", 3, 7),
        &["string values must be quoted"],
    ),
    case(
        "YAML syntax error",
        &[(
            "a.yaml",
            r#"file:
  - src: /etc/hostname
    dst: /etc/name: x
"#,
        )],
        ("a.yaml", 3, 19),
        &["mapping values are not allowed in this context"],
    ),
    case(
        "YAML key indented out of its mapping",
        &[(
            "a.yaml",
            r#"dir:
  - path: /data
  mode: "0700"
"#,
        )],
        ("a.yaml", 3, 3),
        &["did not find expected '-' indicator"],
    ),
    case(
        "a second YAML document",
        &[(
            "a.yaml",
            r#"file:
  - src: /etc/hostname
---
dir:
  - path: /data
"#,
        )],
        ("a.yaml", 3, 1),
        &["a manifest is one YAML document"],
    ),
    case(
        "an architecture composer does not know",
        &[(
            "a.toml",
            r#"[[module]]
names = ["ext4"]
arch = ["x86_64", "aarch46"]
"#,
        )],
        ("a.toml", 3, 19),
        &["`aarch46` is not an architecture composer knows"],
    )
    .hint("did you mean `aarch64`?"),
    // --- the environment ---------------------------------------------------------
    Case {
        name: "source-date-epoch without SOURCE_DATE_EPOCH",
        files: &[(
            "a.toml",
            r#"[defaults]
mtime = "source-date-epoch"
"#,
        )],
        at: None,
        says: &["defaults.mtime is \"source-date-epoch\" but SOURCE_DATE_EPOCH is not set"],
        hint: Some("export SOURCE_DATE_EPOCH"),
    },
];

/// The fake source root every case builds from.
fn make_root(root: &Path) {
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    fs::write(root.join("etc/hostname"), "rescue\n").unwrap();
    fs::write(root.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
    fs::write(root.join("usr/bin/tool"), "#!/bin/sh\n").unwrap();
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs one case; returns what is wrong with it, if anything.
fn run_case(n: usize, c: &Case, scratch: &Path) -> Vec<String> {
    let base = scratch.join(format!("case-{n:02}"));
    let dir = base.join("m");
    let out = base.join("out");
    let root = base.join("root");
    fs::create_dir_all(&dir).unwrap();
    fs::create_dir_all(&out).unwrap();
    make_root(&root);
    for (name, text) in c.files {
        let p = dir.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, text).unwrap();
    }
    let manifests_before = listing(&dir);
    let manifest = dir.join(c.files[0].0);
    let dir_text = dir.display().to_string();

    let mut problems = Vec::new();
    let mut stderrs = Vec::new();
    for command in ["build", "check"] {
        let mut cmd = support::composer();
        cmd.env_remove("SOURCE_DATE_EPOCH")
            .arg(command)
            .arg(&manifest)
            .arg("--root")
            .arg(&root);
        if command == "build" {
            cmd.arg("-o").arg(out.join("out.img"));
        }
        let o = support::run(&mut cmd);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        let mut fail = |what: String| problems.push(format!("{command}: {what}\n{stderr}"));
        if o.status.code() != Some(2) {
            fail(format!("exit status {:?}, expected 2", o.status.code()));
        }
        if stderr.contains("panicked") {
            fail("panicked".into());
        }
        if !stderr.starts_with("composer: error: ") {
            fail("stderr does not start with `composer: error: `".into());
        }
        let first = stderr.lines().next().unwrap_or("");
        match c.at {
            Some((file, line, column)) => {
                let want = format!(
                    "composer: error: {}:{line}:{column}: ",
                    dir.join(file).display()
                );
                if !first.starts_with(&want) {
                    fail(format!("expected the error at `{want}`"));
                }
            }
            None => {
                if first.contains(&dir_text) {
                    fail("expected no manifest position".into());
                }
            }
        }
        for phrase in c.says {
            let phrase = phrase.replace("{dir}", &dir_text);
            if !first.contains(&phrase) {
                fail(format!("the message lacks `{phrase}`"));
            }
        }
        if let Some(hint) = c.hint {
            let line = stderr.lines().nth(1).unwrap_or("");
            if !(line.starts_with("  hint: ") && line.contains(hint)) {
                fail(format!("expected a hint with `{hint}`"));
            }
        }
        if command == "build" && !o.stdout.is_empty() {
            fail("wrote to stdout".into());
        }
        stderrs.push(stderr);
    }
    if stderrs[0] != stderrs[1] {
        problems.push(format!(
            "build and check report differently:\n{}\n{}",
            stderrs[0], stderrs[1]
        ));
    }
    let left = listing(&out);
    if !left.is_empty() {
        problems.push(format!("the output directory is not empty: {left:?}"));
    }
    if listing(&dir) != manifests_before {
        problems.push(format!(
            "the manifest directory changed: {:?}",
            listing(&dir)
        ));
    }
    problems
        .into_iter()
        .map(|p| format!("case {n} ({}): {p}", c.name))
        .collect()
}

#[test]
fn bad_manifests_fail_at_the_culprit_without_output() {
    assert!(CASES.len() >= 24, "only {} cases", CASES.len());
    let scratch = support::Scratch::new("manifest-errors");
    let problems: Vec<String> = CASES
        .iter()
        .enumerate()
        .flat_map(|(n, c)| run_case(n, c, &scratch))
        .collect();
    assert!(
        problems.is_empty(),
        "{} problem(s):\n\n{}",
        problems.len(),
        problems.join("\n\n")
    );
}

/// Both formats say the same thing about the same mistake, at the same
/// place when the text lines up.
#[test]
fn toml_and_yaml_agree_on_messages() {
    let scratch = support::Scratch::new("manifest-errors-pairs");
    let root = scratch.join("root");
    make_root(&root);
    let pairs = [
        (
            "[[file]]\nsrc = \"/etc/hostname\"\nmode = 755\n",
            "file:\n  - src: /etc/hostname\n    mode: 755\n",
        ),
        (
            "[[dir]]\npath = \"/x\"\nuid = \"root\"\n",
            "dir:\n  - path: /x\n    uid: root\n",
        ),
        ("[image]\norder = \"random\"\n", "image:\n  order: random\n"),
    ];
    for (i, (toml, yaml)) in pairs.iter().enumerate() {
        let mut messages = Vec::new();
        for (ext, text) in [("toml", toml), ("yaml", yaml)] {
            let m = scratch.join(format!("p{i}.{ext}"));
            fs::write(&m, text).unwrap();
            let o = support::run(
                support::composer()
                    .arg("check")
                    .arg(&m)
                    .arg("--root")
                    .arg(&root),
            );
            assert_eq!(o.status.code(), Some(2));
            let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
            // Drop `composer: error: FILE:LINE:COLUMN: `.
            let prefix = format!("composer: error: {}:", m.display());
            let rest = stderr
                .strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("{stderr}"));
            let message = rest.splitn(3, ':').nth(2).unwrap().to_string();
            messages.push(message);
        }
        assert_eq!(messages[0], messages[1], "pair {i}");
    }
}
