//! `composer cat IMAGE PATH` prints a file as the unpacked image holds it: a later
//! segment's entry wins, symlinks on the way are followed inside the image (absolute
//! ones from the image's root), a hardlink's first name finds the data its group's
//! last entry carries; loops, directories and missing names are errors that name the
//! image and the path.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::{self, Scratch};

fn list_image(dir: &Path, name: &str, list: &str) -> Vec<u8> {
    let l = dir.join(format!("{name}.list"));
    fs::write(&l, list).unwrap();
    let out = dir.join(format!("{name}.img"));
    support::run_ok(
        support::composer()
            .args(["build", "-t", "0", "--no-sync", "--list"])
            .arg(&l)
            .arg("-o")
            .arg(&out),
    );
    fs::read(out).unwrap()
}

fn cat(image: &Path, path: &str) -> std::process::Output {
    support::run(support::composer().arg("cat").arg(image).arg(path))
}

fn cat_ok(image: &Path, path: &str) -> Vec<u8> {
    let o = cat(image, path);
    assert!(
        o.status.success(),
        "cat {path}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

fn cat_err(image: &Path, path: &str) -> String {
    let o = cat(image, path);
    assert!(!o.status.success(), "cat {path} succeeded");
    assert!(o.stdout.is_empty(), "cat {path} printed data");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn cat_follows_the_kernels_view_of_the_image() {
    let dir = Scratch::new("cat");
    let src = |name: &str, data: &[u8]| {
        let p = dir.join(name);
        fs::write(&p, data).unwrap();
        p.display().to_string()
    };
    let (one, two, tool, big, empty) = (
        src("one", b"one\n"),
        src("two", b"two\n"),
        src("tool", b"#!/bin/sh\necho tool\n"),
        src("big", &(0..300_000u32).map(|i| i as u8).collect::<Vec<_>>()),
        src("empty", b""),
    );
    let first = list_image(
        &dir,
        "first",
        &format!(
            "dir /etc 0755 0 0\n\
             file /etc/a {one} 0644 0 0\n\
             dir /usr 0755 0 0\n\
             dir /usr/bin 0755 0 0\n\
             file /usr/bin/tool {tool} 0755 0 0 /usr/bin/tool2 /etc/tool3\n\
             file /usr/big {big} 0644 0 0\n\
             file /usr/empty {empty} 0644 0 0\n\
             slink /bin usr/bin 0777 0 0\n\
             slink /etc/abs /bin/tool 0777 0 0\n\
             slink /etc/up ../usr/./bin/tool2 0777 0 0\n\
             slink /loop1 loop2 0777 0 0\n\
             slink /loop2 /loop1 0777 0 0\n"
        ),
    );
    let second = list_image(
        &dir,
        "second",
        &format!("dir /etc 0755 0 0\nfile /etc/a {two} 0644 0 0\n"),
    );
    // The second archive as a zstd segment after the first, as the kernel takes them.
    let image = dir.join("image.img");
    let Some(zstd) = support::require_tool("zstd", "zstd") else {
        return;
    };
    let z = support::run_ok(
        Command::new(zstd)
            .args(["-q", "-c"])
            .arg(dir.join("second.img")),
    );
    assert!(second.len() > 100);
    fs::write(&image, [first, z.stdout].concat()).unwrap();

    assert_eq!(cat_ok(&image, "etc/a"), b"two\n", "the later segment wins");
    let tool = b"#!/bin/sh\necho tool\n".to_vec();
    for path in [
        "usr/bin/tool",
        "/usr/bin/tool2",
        "etc/tool3",
        "bin/tool",
        "./bin//tool2",
        "etc/abs",
        "etc/up",
        "usr/bin/../bin/tool",
    ] {
        assert_eq!(cat_ok(&image, path), tool, "{path}");
    }
    assert_eq!(
        cat_ok(&image, "usr/big"),
        fs::read(dir.join("big")).unwrap()
    );
    assert_eq!(cat_ok(&image, "usr/empty"), b"");

    let e = cat_err(&image, "loop1");
    assert!(e.contains("too many levels of symbolic links"), "{e}");
    let e = cat_err(&image, "usr/bin");
    assert!(e.contains("`usr/bin` is not a regular file"), "{e}");
    let e = cat_err(&image, "etc/missing");
    assert!(
        e.contains("image.img") && e.contains("no `etc/missing` in the image"),
        "{e}"
    );
    let e = cat_err(&image, "etc/a/b");
    assert!(e.contains("`etc/a` is not a directory"), "{e}");
    let e = cat_err(&image, "/");
    assert!(e.contains("names no file"), "{e}");
}

/// The subcommands `composer --help` lists.
fn subcommands() -> Vec<String> {
    let help = support::run_ok(support::composer().arg("--help"));
    String::from_utf8_lossy(&help.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn completions_and_man_pages_cover_every_subcommand() {
    let subcommands = subcommands();
    assert!(subcommands.len() > 10, "{subcommands:?}");
    for shell in ["bash", "zsh", "fish"] {
        let out = support::run_ok(support::composer().args(["completions", shell]));
        let text = String::from_utf8_lossy(&out.stdout);
        for c in &subcommands {
            assert!(text.contains(c.as_str()), "{shell} completions lack `{c}`");
        }
    }
    let dir = Scratch::new("man-pages");
    let man = dir.join("man1");
    support::run_ok(support::composer().arg("man").arg(&man));
    let page = fs::read_to_string(man.join("composer.1")).unwrap();
    assert!(page.contains(".TH composer"), "{page}");
    for c in &subcommands {
        let p = man.join(format!("composer-{c}.1"));
        let text = fs::read_to_string(&p).unwrap_or_else(|_| panic!("no {}", p.display()));
        let name = format!("composer-{c}").replace('-', "\\-");
        assert!(text.contains(&format!("{name} \\- ")), "{}", p.display());
    }
}

/// 0 success; 1 `verify` found problems or `diff` found differences; 2 trouble
/// (usage, I/O, bad input): the table in the book's command line page.
#[test]
fn exit_codes_tell_findings_from_trouble() {
    let dir = Scratch::new("exit-codes");
    let data = dir.join("data");
    fs::write(&data, b"data\n").unwrap();
    let good = list_image(
        &dir,
        "good",
        &format!("file /a {} 0644 0 0\n", data.display()),
    );
    let other = list_image(
        &dir,
        "other",
        &format!("file /b {} 0644 0 0\n", data.display()),
    );
    let (good_img, other_img) = (dir.join("good.img"), dir.join("other.img"));
    assert!(!good.is_empty() && !other.is_empty());
    // Junk after the trailer: neither a header nor a stream the kernel knows.
    let mut bad = good.clone();
    bad.extend_from_slice(b"JUNK");
    let bad_img = dir.join("bad.img");
    fs::write(&bad_img, bad).unwrap();

    let code =
        |args: &[&std::ffi::OsStr]| support::run(support::composer().args(args)).status.code();
    let os = |s: &str| std::ffi::OsStr::new(s).to_owned();
    let (g, o, b) = (
        good_img.as_os_str().to_owned(),
        other_img.as_os_str().to_owned(),
        bad_img.as_os_str().to_owned(),
    );
    let missing = dir.join("missing.img").into_os_string();
    for (args, want) in [
        (vec![os("verify"), g.clone()], 0),
        (vec![os("diff"), g.clone(), g.clone()], 0),
        (vec![os("verify"), b.clone()], 1),
        (vec![os("diff"), g.clone(), o.clone()], 1),
        (vec![os("verify"), missing.clone()], 2),
        (vec![os("diff"), g.clone(), missing.clone()], 2),
        (vec![os("inspect"), missing.clone()], 2),
        (vec![os("cat"), g.clone(), os("nope")], 2),
        (vec![os("build"), os("--no-such-flag")], 2),
        (
            vec![os("build"), os("-a"), os("3"), os("--list"), os("x")],
            2,
        ),
        (vec![os("no-such-command")], 2),
    ] {
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        assert_eq!(code(&refs), Some(want), "composer {args:?}");
    }
}

#[test]
fn inspect_lists_only_the_paths_and_globs_given() {
    let dir = Scratch::new("inspect-filter");
    let data = dir.join("data");
    fs::write(&data, b"data\n").unwrap();
    let d = data.display();
    list_image(
        &dir,
        "image",
        &format!(
            "dir /etc 0755 0 0\nfile /etc/a {d} 0644 0 0\nfile /etc/b {d} 0644 0 0\n\
             dir /usr 0755 0 0\ndir /usr/bin 0755 0 0\nfile /usr/bin/tool {d} 0755 0 0\n\
             dir /usr/bin2 0755 0 0\nfile /usr/x.ko {d} 0644 0 0\n"
        ),
    );
    let image = dir.join("image.img");
    let list = |args: &[&str]| {
        let o = support::run_ok(support::composer().arg("inspect").arg(&image).args(args));
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(list(&["usr/bin"]), "usr/bin\nusr/bin/tool\n");
    assert_eq!(list(&["/usr/bin/"]), "usr/bin\nusr/bin/tool\n");
    assert_eq!(list(&["etc/*"]), "etc/a\netc/b\n");
    assert_eq!(list(&["**/*.ko", "etc/b"]), "etc/b\nusr/x.ko\n");
    assert_eq!(list(&["nothing"]), "");
    let long = list(&["-l", "etc/a"]);
    assert_eq!(long.lines().count(), 1, "{long}");
    assert!(long.ends_with(" etc/a\n"), "{long}");
    let json = list(&["--json", "usr/bin"]);
    assert!(
        json.contains("\"usr/bin/tool\"") && !json.contains("\"etc/a\""),
        "{json}"
    );
}

#[test]
fn build_ends_with_a_summary_line_and_q_keeps_it_quiet() {
    let dir = Scratch::new("build-summary");
    let data = dir.join("data");
    fs::write(&data, b"data\n").unwrap();
    let l = dir.join("x.list");
    fs::write(
        &l,
        format!(
            "dir /etc 0755 0 0\nfile /etc/a {} 0644 0 0\n",
            data.display()
        ),
    )
    .unwrap();
    let out = dir.join("x.img");
    let o = support::run_ok(
        support::composer()
            .args(["build", "--no-sync", "--list"])
            .arg(&l)
            .arg("-o")
            .arg(&out),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    let size = fs::metadata(&out).unwrap().len();
    let want = format!("composer: wrote {}: {size} bytes (", out.display());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with(&want), "{stderr}");
    assert!(stderr.contains(" 2 entries in 1 segment, "), "{stderr}");
    let o = support::run_ok(
        support::composer()
            .args(["-q", "build", "--no-sync", "--list"])
            .arg(&l)
            .arg("-o")
            .arg(&out),
    );
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // -v: how the data moved, before the summary.
    let o = support::run_ok(
        support::composer()
            .args(["-v", "build", "--no-sync", "--list"])
            .arg(&l)
            .arg("-o")
            .arg(&out),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with("composer: note: file data: "),
        "{stderr}"
    );
    // The one file of 5 bytes goes through memory (too small to share).
    assert!(
        lines[0].contains(" 5 bytes copied through memory"),
        "{stderr}"
    );
    assert!(lines[1].starts_with(&want), "{stderr}");
    // gen-init-cpio stays as silent as the kernel's tool.
    let o = support::run_ok(
        support::composer()
            .args(["gen-init-cpio", "-o"])
            .arg(&out)
            .arg(&l),
    );
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn an_archive_is_never_written_to_a_terminal() {
    let Some(script) = support::require_tool("script", "bsdutils") else {
        return;
    };
    let dir = Scratch::new("tty-refused");
    let data = dir.join("data");
    fs::write(&data, b"data\n").unwrap();
    let l = dir.join("x.list");
    fs::write(&l, format!("file /a {} 0644 0 0\n", data.display())).unwrap();
    let bin = support::composer_bin();
    for cmd in [
        format!("{} build --list {} -o -", bin.display(), l.display()),
        format!("{} gen-init-cpio {}", bin.display(), l.display()),
    ] {
        // `script` runs the command on a new pseudo-terminal and copies what it
        // prints; -e passes its exit status on.
        let o = support::run(
            Command::new(&script)
                .args(["-q", "-e", "-c"])
                .arg(format!("{cmd}; echo \"status=$?\""))
                .arg("/dev/null")
                .stdin(std::process::Stdio::null()),
        );
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains("refusing to write an archive to the terminal"),
            "{cmd}: {text}"
        );
        assert!(text.contains("status=2"), "{cmd}: {text}");
        assert!(!text.contains("070701"), "{cmd} wrote the archive: {text}");
    }
}

/// Every subcommand's help describes each positional argument and ends with an
/// example.
#[test]
fn every_subcommand_help_describes_its_arguments_and_ends_with_an_example() {
    let subcommands = subcommands();
    let mut problems = Vec::new();
    for c in &subcommands {
        let out = support::run_ok(support::composer().args([c.as_str(), "-h"]));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let tail: Vec<&str> = text.trim_end().lines().collect();
        let example = tail
            .iter()
            .rposition(|l| l.starts_with("Example"))
            .is_some_and(|i| {
                i + 1 < tail.len() && tail[i + 1].trim_start().starts_with("composer ")
            });
        if !example {
            problems.push(format!("`composer {c} -h` does not end with an example"));
        }
        for l in text
            .lines()
            .skip_while(|l| !l.starts_with("Arguments:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
        {
            // `  <NAME>  description` or `  [NAME]...  description`
            let words: Vec<&str> = l.split_whitespace().collect();
            if words.len() < 2 {
                problems.push(format!(
                    "`composer {c}`: argument `{}` has no description",
                    l.trim()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn verify_and_diff_speak_json() {
    let dir = Scratch::new("json-reports");
    let data = dir.join("data");
    fs::write(&data, b"data\n").unwrap();
    let d = data.display();
    let mut good = list_image(&dir, "good", &format!("file /a {d} 0644 0 0\n"));
    list_image(
        &dir,
        "other",
        &format!("file /b {d} 0644 0 0\nfile /a {d} 0600 0 0\n"),
    );
    good.extend_from_slice(b"JUNK");
    fs::write(dir.join("bad.img"), good).unwrap();
    let json = |args: &[&Path], want: i32| -> serde_json::Value {
        let o = support::run(support::composer().args(args));
        assert_eq!(o.status.code(), Some(want), "{args:?}");
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    };
    let (v, df, j) = (Path::new("verify"), Path::new("diff"), Path::new("--json"));
    let ok = json(&[v, j, &dir.join("good.img")], 0);
    assert_eq!(ok["ok"], true);
    assert_eq!(ok["entries"], 1);
    assert_eq!(ok["findings"].as_array().unwrap().len(), 0);
    let bad = json(&[v, j, &dir.join("bad.img")], 1);
    assert_eq!(bad["ok"], false);
    let findings = bad["findings"].as_array().unwrap();
    assert!(!findings.is_empty(), "{bad}");
    assert!(findings[0]["message"].as_str().unwrap().len() > 10, "{bad}");
    assert!(findings[0]["offset"].as_u64().is_some(), "{bad}");

    let changes = json(&[df, j, &dir.join("good.img"), &dir.join("other.img")], 1);
    let list = changes["changes"].as_array().unwrap();
    assert!(
        list.iter()
            .any(|c| c["change"] == "added" && c["name"] == "b" && c["kind"] == "file"),
        "{changes}"
    );
    assert!(
        list.iter()
            .any(|c| c["change"] == "changed" && c["name"] == "a"),
        "{changes}"
    );
    let same = json(&[df, j, &dir.join("good.img"), &dir.join("good.img")], 0);
    assert_eq!(same["changes"].as_array().unwrap().len(), 0);
}

#[test]
fn check_and_deps_speak_json() {
    let minimal = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/minimal.toml");
    let o = support::run_ok(support::composer().args(["check", "--json"]).arg(&minimal));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["entries"].as_u64().unwrap() > 5, "{doc}");
    assert!(doc["files"].as_u64().unwrap() > 0, "{doc}");
    assert_eq!(doc["segments"].as_array().unwrap().len(), 1, "{doc}");
    assert!(doc["warnings"].is_array(), "{doc}");

    let o = support::run_ok(support::composer().args(["deps", "--json", "sh"]));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = support::run_ok(support::composer().args(["deps", "sh"]));
    let lines: Vec<String> = String::from_utf8_lossy(&text.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let paths: Vec<String> = doc["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, lines, "JSON and text name the same files");
    assert!(paths.iter().any(|p| p.contains("libc.so")), "{paths:?}");
}

/// On a terminal a build that takes a while draws a progress bar on
/// standard error (cleared before the summary); with `-q`, or when standard
/// error is not a terminal, nothing but the summary.
#[test]
fn a_progress_bar_only_on_a_terminal() {
    let Some(script) = support::require_tool("script", "bsdutils") else {
        return;
    };
    let dir = Scratch::new("progress");
    // Random bytes, so that gzip has work to do for a while.
    let mut data = vec![0u8; 2 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    fs::write(dir.join("blob"), &data).unwrap();
    let m = dir.join("p.toml");
    fs::write(
        &m,
        "[[file]]\nsrc = \"blob\"\ndst = \"/blob\"\n\n[[segment]]\nname = \"main\"\ncompression = \"gzip\"\nlevel = 9\n",
    )
    .unwrap();
    let out = dir.join("p.img");
    let bin = support::composer_bin();
    let on_tty = |quiet: &str| {
        let o = support::run(
            Command::new(&script)
                .args(["-q", "-e", "-c"])
                .arg(format!(
                    "{} {quiet} build --no-sync {} -o {}",
                    bin.display(),
                    m.display(),
                    out.display()
                ))
                .arg("/dev/null")
                .env("COMPOSER_PROGRESS_DELAY_MS", "0")
                .stdin(std::process::Stdio::null()),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let text = on_tty("");
    assert!(text.contains("composer: writing"), "no bar: {text:?}");
    assert!(text.contains("/2.00 MiB"), "no byte count: {text:?}");
    // The summary comes last, after the bar was cleared.
    let last = text.rsplit("\x1b[2K").next().unwrap();
    assert!(
        last.trim_start().starts_with("composer: wrote "),
        "{text:?}"
    );
    let text = on_tty("-q");
    assert!(!text.contains("composer:"), "-q: {text:?}");
    // Not a terminal: the summary line only, even with no delay.
    let o = support::run_ok(
        support::composer()
            .env("COMPOSER_PROGRESS_DELAY_MS", "0")
            .args(["build", "--no-sync"])
            .arg(&m)
            .arg("-o")
            .arg(&out),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("composer: wrote "), "{stderr}");
}
