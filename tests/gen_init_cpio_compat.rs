//! composer against the kernel's gen_init_cpio, on the legacy-list corpus
//! (`tests/lists/*.list`, see `tests/corpus/mod.rs`).
//!
//! - `composer gen-init-cpio` (stdout, `-o FILE`, list on stdin) and `composer build`
//!   must write exactly the bytes of the kernel tool (6.12, built from source as an
//!   oracle), with `-t` and with `-t -c`; without `-t` everything but the current-time
//!   mtimes must agree.
//! - `-a N` (6.18; the oracle predates it) is checked against the rule: data of every
//!   regular file larger than N starts at a multiple of N unless the entry is reported
//!   as missed; the missed set is exactly what the rule predicts; no namesize exceeds
//!   4096; and removing the name padding gives back the oracle's unaligned archive.
//! - Self-checks of the harness: the corpus is broad enough, the independent newc reader
//!   reads the oracle's archives, and an independent model of gen_init_cpio built from
//!   the list parser predicts the oracle's bytes.
//!
//! `COMPOSER_CORPUS_FILTER=<substring>` limits the run to some lists.

use crate::corpus;
use crate::newc;
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use corpus::{Kind, ListFile, MTIME};
use newc::{Archive, Header};

const ALIGNMENTS: [u32; 4] = [4, 512, 4096, 65536];
const PATH_MAX: usize = 4096;

// ---------------------------------------------------------------------------------------
// Running the tools
// ---------------------------------------------------------------------------------------

struct Ctx {
    oracle: PathBuf,
    fixtures: &'static Path,
}

fn ctx() -> Option<Ctx> {
    let oracle = support::kernel_gen_init_cpio()?;
    Some(Ctx {
        oracle,
        fixtures: corpus::fixtures(),
    })
}

fn show_cmd(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` with the corpus environment; `stdin` is fed if given.
fn run_with(ctx: &Ctx, cmd: &mut Command, stdin: Option<&[u8]>) -> Output {
    corpus::apply_env(cmd, ctx.fixtures);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", show_cmd(cmd)));
    let writer = stdin.map(|data| {
        let mut pipe = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        })
    });
    let out = child.wait_with_output().unwrap();
    if let Some(w) = writer {
        w.join().unwrap();
    }
    out
}

/// The oracle's archive for `list` with `args` (e.g. `-t N`, `-c`). The corpus is valid
/// for the oracle: it must succeed without a word on stderr.
fn oracle(ctx: &Ctx, list: &ListFile, args: &[&str]) -> Vec<u8> {
    let mut cmd = Command::new(&ctx.oracle);
    cmd.args(args).arg(&list.path);
    let out = run_with(ctx, &mut cmd, None);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "oracle on {}: {} (stderr: {})",
        list.name,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Runs `composer <subcommand> [--compat] <args>` (`--compat` for lists marked so).
fn composer(
    ctx: &Ctx,
    l: &ListFile,
    subcommand: &str,
    args: &[&OsStr],
    stdin: Option<&[u8]>,
) -> (Command, Output) {
    let mut cmd = support::composer();
    cmd.args(l.composer_args(subcommand)).args(args);
    let out = run_with(ctx, &mut cmd, stdin);
    (cmd, out)
}

/// Checks that a composer run succeeded; returns a failure message otherwise.
fn succeeded(what: &str, cmd: &Command, out: &Output) -> Result<(), String> {
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}: `{}` failed with {}: {}",
            show_cmd(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn t_arg() -> String {
    MTIME.to_string()
}

/// Runs `check` for every selected list and reports all failures at once.
fn for_each_list(what: &str, mut check: impl FnMut(&ListFile) -> Result<(), String>) {
    let lists = corpus::selected_lists();
    assert!(!lists.is_empty(), "no list selected");
    let mut failures = Vec::new();
    for l in &lists {
        if let Err(msg) = check(l) {
            failures.push(format!("--- {}: {msg}", l.name));
        }
    }
    if !failures.is_empty() {
        let total = failures.len();
        let mut report = failures.into_iter().take(12).collect::<Vec<_>>().join("\n");
        if total > 12 {
            report.push_str(&format!("\n... and {} more", total - 12));
        }
        panic!("{what}: {total} of {} lists failed\n{report}", lists.len());
    }
    eprintln!("{what}: {} lists ok", lists.len());
}

fn same_bytes(expected: &[u8], actual: &[u8], what_actual: &str) -> Result<(), String> {
    match newc::explain_difference(expected, actual, "gen_init_cpio", what_actual) {
        None => Ok(()),
        Some(msg) => Err(msg),
    }
}

// ---------------------------------------------------------------------------------------
// Harness self-checks (need only the oracle)
// ---------------------------------------------------------------------------------------

#[test]
fn corpus_is_broad_enough() {
    let lists = corpus::lists();
    assert!(lists.len() >= 32, "only {} lists", lists.len());
    let vars = corpus::env_vars(Path::new("/fixtures"));
    let mut kinds = BTreeSet::new();
    let mut group_sizes = BTreeSet::new();
    let mut longest = 0;
    let mut non_utf8 = false;
    for l in &lists {
        assert!(l.bytes.len() < 200 * 1024, "{} is too big", l.name);
        // gen_init_cpio reads lines with fgets into 2 * PATH_MAX + 50 bytes.
        for (i, line) in l.bytes.split(|&b| b == b'\n').enumerate() {
            assert!(
                line.len() < 2 * 4096 + 48,
                "{}:{}: line too long for gen_init_cpio",
                l.name,
                i + 1
            );
        }
        let entries = corpus::parse_list(&l.bytes, &vars);
        assert!(!entries.is_empty(), "{} is empty", l.name);
        for e in &entries {
            kinds.insert(match &e.kind {
                Kind::File { .. } => "file",
                Kind::Dir => "dir",
                Kind::Slink { .. } => "slink",
                Kind::Nod { block: true, .. } => "nod b",
                Kind::Nod { block: false, .. } => "nod c",
                Kind::Pipe => "pipe",
                Kind::Sock => "sock",
            });
            if let Kind::File { links, .. } = &e.kind {
                group_sizes.insert(links.len() + 1);
            }
            for n in e.all_names() {
                longest = longest.max(n.len());
                for c in n.split(|&b| b == b'/') {
                    assert!(
                        c.len() <= 255,
                        "{}:{}: a name component is over 255 bytes",
                        l.name,
                        e.line
                    );
                }
                non_utf8 |= std::str::from_utf8(&n).is_err();
            }
        }
    }
    assert_eq!(kinds.len(), 7, "entry types covered: {kinds:?}");
    for n in [1, 2, 3, 5] {
        assert!(group_sizes.contains(&n), "no hardlink group of {n} names");
    }
    assert_eq!(
        longest, 4095,
        "the longest name should be exactly 4095 bytes"
    );
    assert!(non_utf8, "no non-UTF-8 name");
}

/// The independent reader reads every oracle archive, and writing it back gives the same
/// bytes; the independent model of gen_init_cpio predicts the oracle's archive.
#[test]
fn harness_reads_and_predicts_the_oracle() {
    let Some(ctx) = ctx() else { return };
    let t = t_arg();
    for_each_list("harness vs oracle", |l| {
        for csum in [false, true] {
            let mut args = vec!["-t", &t];
            if csum {
                args.push("-c");
            }
            let bytes = oracle(&ctx, l, &args);
            let archive =
                newc::parse(&bytes).map_err(|e| format!("newc reader (-c {csum}): {e}"))?;
            let rewritten = newc::strip_name_padding(&bytes, &archive);
            same_bytes(&bytes, &rewritten, "newc reader + writer")?;
            let model = model_archive(&ctx, l, csum);
            same_bytes(&bytes, &model, "model from the list parser")?;
        }
        Ok(())
    });
}

/// What gen_init_cpio writes for `list` with `-t MTIME` (and `-c`), from the list parser
/// and the rules of the format reference, independently of both tools.
fn model_archive(ctx: &Ctx, list: &ListFile, csum: bool) -> Vec<u8> {
    let vars = corpus::env_vars(ctx.fixtures);
    let mut out = Vec::new();
    // One ino per line, from 721.
    for (ino, e) in (721u32..).zip(corpus::parse_list(&list.bytes, &vars)) {
        let base = Header {
            ino,
            uid: e.uid,
            gid: e.gid,
            mtime: MTIME,
            devmajor: 3,
            devminor: 1,
            ..Header::default()
        };
        match &e.kind {
            Kind::File { location, links } => {
                let data = corpus::content_of(location, ctx.fixtures);
                let names = e.all_names();
                for (i, name) in names.iter().enumerate() {
                    let last = i + 1 == names.len();
                    let hdr = Header {
                        mode: newc::S_IFREG | e.perm,
                        nlink: links.len() as u32 + 1,
                        check: if csum && last && !data.is_empty() {
                            newc::checksum(&data)
                        } else {
                            0
                        },
                        ..base
                    };
                    newc::write_entry(
                        &mut out,
                        csum,
                        &hdr,
                        name,
                        0,
                        if last { &data } else { &[] },
                    );
                }
            }
            Kind::Slink { target } => {
                let hdr = Header {
                    mode: newc::S_IFLNK | e.perm,
                    nlink: 1,
                    ..base
                };
                let data = [target.as_slice(), b"\0"].concat();
                newc::write_entry(&mut out, csum, &hdr, &e.name, 0, &data);
            }
            Kind::Nod {
                block,
                major,
                minor,
            } => {
                let ty = if *block { newc::S_IFBLK } else { newc::S_IFCHR };
                let hdr = Header {
                    mode: ty | e.perm,
                    nlink: 1,
                    rdevmajor: *major,
                    rdevminor: *minor,
                    ..base
                };
                newc::write_entry(&mut out, csum, &hdr, &e.name, 0, &[]);
            }
            Kind::Dir | Kind::Pipe | Kind::Sock => {
                let ty = match e.kind {
                    Kind::Dir => newc::S_IFDIR,
                    Kind::Pipe => newc::S_IFIFO,
                    _ => newc::S_IFSOCK,
                };
                let hdr = Header {
                    mode: ty | e.perm,
                    nlink: 2,
                    ..base
                };
                newc::write_entry(&mut out, csum, &hdr, &e.name, 0, &[]);
            }
        }
    }
    newc::write_trailer(&mut out, csum);
    out
}

/// What `-a n` must make of an unaligned archive: the archive with name padding added
/// by the rule, and the names reported as missed, in archive order.
fn align_model(bytes: &[u8], archive: &Archive, n: u32) -> (Vec<u8>, Vec<Vec<u8>>) {
    let n = n as usize;
    let mut out = Vec::with_capacity(bytes.len());
    let mut missed = Vec::new();
    for e in &archive.entries {
        let namesize = e.name.len() + 1;
        let mut pad = 0;
        if e.hdr.is_regular() && e.hdr.filesize as usize > n {
            let p = (n - (out.len() + newc::HEADER_LEN + namesize) % n) % n;
            if namesize + p > PATH_MAX {
                missed.push(e.name.clone());
            } else {
                pad = p;
            }
        }
        newc::write_entry(
            &mut out,
            e.crc,
            &e.hdr,
            &e.name,
            pad,
            &bytes[e.data.clone()],
        );
    }
    newc::write_trailer(&mut out, archive.trailer.crc);
    (out, missed)
}

/// The corpus makes `-a` meaningful: at 4096 and 65536 some eligible files miss and some
/// are aligned, and names longer than 3900 bytes both miss and hit somewhere.
#[test]
fn corpus_exercises_alignment_misses() {
    let Some(ctx) = ctx() else { return };
    let t = t_arg();
    let mut stats: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    let mut long_hits = 0;
    for l in corpus::lists() {
        let bytes = oracle(&ctx, &l, &["-t", &t]);
        let archive = newc::parse(&bytes).unwrap();
        for n in ALIGNMENTS {
            let (aligned, missed) = align_model(&bytes, &archive, n);
            let eligible = archive
                .entries
                .iter()
                .filter(|e| e.hdr.is_regular() && e.hdr.filesize > n)
                .count();
            let s = stats.entry(n).or_default();
            s.0 += eligible - missed.len();
            s.1 += missed.len();
            let parsed = newc::parse(&aligned).unwrap();
            long_hits += parsed
                .entries
                .iter()
                .filter(|e| e.name.len() > 3900 && e.name_pad() > 0)
                .count();
        }
    }
    eprintln!("(aligned, missed) per alignment: {stats:?}; long names aligned: {long_hits}");
    for n in [4096, 65536] {
        let (hit, miss) = stats[&n];
        assert!(hit > 0 && miss > 0, "-a {n}: {hit} aligned, {miss} missed");
    }
    assert!(long_hits > 0, "no name over 3900 bytes is ever padded");
}

// ---------------------------------------------------------------------------------------
// composer against the oracle
// ---------------------------------------------------------------------------------------

/// `flags` followed by the list path.
fn with_list<'a>(flags: &'a [&'a str], list: &'a Path) -> Vec<&'a OsStr> {
    let mut v: Vec<&OsStr> = flags.iter().map(OsStr::new).collect();
    v.push(list.as_os_str());
    v
}

fn compare_gen_init_cpio(ctx: &Ctx, l: &ListFile, flags: &[&str]) -> Result<(), String> {
    let expected = oracle(ctx, l, flags);
    let (cmd, out) = composer(ctx, l, "gen-init-cpio", &with_list(flags, &l.path), None);
    succeeded("gen-init-cpio", &cmd, &out)?;
    if !out.stderr.is_empty() {
        return Err(format!(
            "unexpected stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    same_bytes(
        &expected,
        &out.stdout,
        &format!("composer gen-init-cpio {}", flags.join(" ")),
    )
}

#[test]
fn gen_init_cpio_matches_oracle() {
    let Some(ctx) = ctx() else { return };
    let t = t_arg();
    for_each_list("gen-init-cpio -t", |l| {
        compare_gen_init_cpio(&ctx, l, &["-t", &t])
    });
}

#[test]
fn gen_init_cpio_checksums_match_oracle() {
    let Some(ctx) = ctx() else { return };
    let t = t_arg();
    for_each_list("gen-init-cpio -t -c", |l| {
        compare_gen_init_cpio(&ctx, l, &["-t", &t, "-c"])
    });
}

/// `--compat` changes nothing for lists without traps.
#[test]
fn compat_flag_matches_oracle() {
    let Some(ctx) = ctx() else { return };
    let t = t_arg();
    for_each_list("gen-init-cpio --compat -t", |l| {
        let forced = ListFile {
            compat: true,
            ..l.clone()
        };
        compare_gen_init_cpio(&ctx, &forced, &["-t", &t])
    });
}

#[test]
fn mtime_extremes_match_oracle() {
    let Some(ctx) = ctx() else { return };
    let lists: Vec<ListFile> = corpus::lists()
        .into_iter()
        .filter(|l| ["02-", "09-", "33-"].iter().any(|p| l.name.starts_with(p)))
        .collect();
    for l in &lists {
        for t in ["0", "1", "4294967295", "0000000042"] {
            if let Err(msg) = compare_gen_init_cpio(&ctx, l, &["-t", t]) {
                panic!("{} with -t {t}: {msg}", l.name);
            }
        }
    }
}

/// Without `-t`, regular files take their source's mtime and everything else the
/// current time: all fields agree except those current-time mtimes, which must lie in
/// the time window of the run.
#[test]
fn gen_init_cpio_without_t_matches_oracle() {
    let Some(ctx) = ctx() else { return };
    for_each_list("gen-init-cpio without -t", |l| {
        // time(2) reads a coarse clock that may lag SystemTime by a tick.
        let before = now().saturating_sub(1);
        let expected = oracle(&ctx, l, &[]);
        let (cmd, out) = composer(&ctx, l, "gen-init-cpio", &with_list(&[], &l.path), None);
        let after = now() + 1;
        succeeded("gen-init-cpio", &cmd, &out)?;
        let a = newc::parse(&expected).map_err(|e| format!("oracle archive: {e}"))?;
        let b = newc::parse(&out.stdout).map_err(|e| format!("composer archive: {e}"))?;
        if a.entries.len() != b.entries.len() {
            return Err(format!(
                "{} entries vs {}",
                a.entries.len(),
                b.entries.len()
            ));
        }
        for (x, y) in a.entries.iter().zip(&b.entries) {
            let (mut hx, mut hy) = (x.hdr, y.hdr);
            if !hx.is_regular() {
                for (who, h) in [("oracle", &hx), ("composer", &hy)] {
                    if !(before..=after).contains(&h.mtime) {
                        return Err(format!(
                            "{} {}: mtime {} outside the run's time window {before}..={after}",
                            who,
                            newc::short_name(&x.name),
                            h.mtime
                        ));
                    }
                }
                hx.mtime = 0;
                hy.mtime = 0;
            }
            if hx != hy
                || x.name != y.name
                || expected[x.data.clone()] != out.stdout[y.data.clone()]
            {
                return Err(format!(
                    "entry {} differs:\n  gen_init_cpio: {}\n  composer:      {}",
                    newc::short_name(&x.name),
                    newc::describe_header(x.crc, &x.hdr),
                    newc::describe_header(y.crc, &y.hdr)
                ));
            }
        }
        Ok(())
    });
}

fn now() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32
}

#[test]
fn build_matches_oracle() {
    let Some(ctx) = ctx() else { return };
    let dir = support::Scratch::new("compat-build");
    let t = t_arg();
    for_each_list("build --list", |l| {
        for csum in [false, true] {
            let mut flags = vec!["-t", t.as_str()];
            if csum {
                flags.push("-c");
            }
            let expected = oracle(&ctx, l, &flags);
            let out_path = dir.join(format!("{}.cpio", l.name));
            let mut args: Vec<&OsStr> = vec![
                "--list".as_ref(),
                l.path.as_os_str(),
                "-o".as_ref(),
                out_path.as_os_str(),
            ];
            args.extend(flags.iter().map(OsStr::new));
            let (cmd, out) = composer(&ctx, l, "build", &args, None);
            succeeded("build", &cmd, &out)?;
            let got = fs::read(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
            let _ = fs::remove_file(&out_path);
            same_bytes(
                &expected,
                &got,
                &format!("composer build {}", flags.join(" ")),
            )?;
        }
        Ok(())
    });
}

#[test]
fn output_file_matches_oracle() {
    let Some(ctx) = ctx() else { return };
    let dir = support::Scratch::new("compat-o");
    let t = t_arg();
    for_each_list("gen-init-cpio -o FILE", |l| {
        let expected = oracle(&ctx, l, &["-t", &t]);
        let out_path = dir.join(format!("{}.cpio", l.name));
        // An existing, longer file must be truncated.
        fs::write(&out_path, vec![0xAAu8; expected.len() + 1000]).unwrap();
        let args: Vec<&OsStr> = vec![
            "-t".as_ref(),
            t.as_ref(),
            "-o".as_ref(),
            out_path.as_os_str(),
            l.path.as_os_str(),
        ];
        let (cmd, out) = composer(&ctx, l, "gen-init-cpio", &args, None);
        succeeded("gen-init-cpio -o", &cmd, &out)?;
        if !out.stdout.is_empty() {
            return Err(format!("{} bytes on stdout with -o", out.stdout.len()));
        }
        let got = fs::read(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
        let _ = fs::remove_file(&out_path);
        same_bytes(&expected, &got, "composer gen-init-cpio -o FILE")
    });
}

/// A new `-o` file gets mode 0600, as with the kernel tool (`open(..., 0600)`).
#[test]
fn output_file_is_private() {
    let Some(ctx) = ctx() else { return };
    let dir = support::Scratch::new("compat-o-mode");
    let l = corpus::lists().into_iter().next().unwrap();
    let out_path = dir.join("new.cpio");
    let t = t_arg();
    let args: Vec<&OsStr> = vec![
        "-t".as_ref(),
        t.as_ref(),
        "-o".as_ref(),
        out_path.as_os_str(),
        l.path.as_os_str(),
    ];
    let (cmd, out) = composer(&ctx, &l, "gen-init-cpio", &args, None);
    succeeded("gen-init-cpio -o", &cmd, &out).unwrap();
    let mode = fs::metadata(&out_path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600, "mode of a new -o file is {mode:o}");
}

#[test]
fn list_on_stdin_matches_oracle() {
    let Some(ctx) = ctx() else { return };
    let t = t_arg();
    for_each_list("gen-init-cpio - (stdin)", |l| {
        let mut cmd = Command::new(&ctx.oracle);
        cmd.args(["-t", &t, "-"]);
        let expected = run_with(&ctx, &mut cmd, Some(&l.bytes));
        assert!(expected.status.success(), "oracle with stdin on {}", l.name);
        let args: Vec<&OsStr> = vec!["-t".as_ref(), t.as_ref(), "-".as_ref()];
        let (cmd, out) = composer(&ctx, l, "gen-init-cpio", &args, Some(&l.bytes));
        succeeded("gen-init-cpio -", &cmd, &out)?;
        same_bytes(
            &expected.stdout,
            &out.stdout,
            "composer gen-init-cpio - (stdin)",
        )
    });
}

// ---------------------------------------------------------------------------------------
// -a N
// ---------------------------------------------------------------------------------------

/// Every check of an aligned archive `got` (composer, `-a n`) against the oracle's
/// unaligned archive `plain`; `stderr` is composer's.
fn check_aligned(plain: &[u8], got: &[u8], stderr: &[u8], n: u32) -> Result<(), String> {
    let archive = newc::parse(got).map_err(|e| format!("-a {n} archive does not parse: {e}"))?;
    let nn = n as usize;
    // The missed set composer reports.
    let suffix = format!(": best-effort alignment {n} missed").into_bytes();
    let mut reported = Vec::new();
    for line in stderr.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match line.strip_suffix(suffix.as_slice()) {
            Some(name) => reported.push(name.to_vec()),
            None => {
                return Err(format!(
                    "unexpected stderr line {:?}",
                    String::from_utf8_lossy(line)
                ))
            }
        }
    }
    // Recompute the rule from the parsed headers.
    let mut predicted = Vec::new();
    for e in &archive.entries {
        if e.hdr.namesize as usize > PATH_MAX {
            return Err(format!(
                "{}: namesize {} > {PATH_MAX}",
                newc::short_name(&e.name),
                e.hdr.namesize
            ));
        }
        let unpadded = e.name.len() + 1;
        let eligible = e.hdr.is_regular() && e.hdr.filesize > n;
        if !eligible {
            if e.name_pad() != 0 {
                return Err(format!(
                    "{} (not a regular file > {n} bytes with data) has {} bytes of name padding",
                    newc::short_name(&e.name),
                    e.name_pad()
                ));
            }
            continue;
        }
        let pad = (nn - (e.offset + newc::HEADER_LEN + unpadded) % nn) % nn;
        if unpadded + pad > PATH_MAX {
            predicted.push(e.name.clone());
            if e.name_pad() != 0 {
                return Err(format!(
                    "{}: a predicted miss is padded",
                    newc::short_name(&e.name)
                ));
            }
        } else {
            if e.name_pad() != pad {
                return Err(format!(
                    "{} at {}: name padding {} instead of {pad}",
                    newc::short_name(&e.name),
                    e.offset,
                    e.name_pad()
                ));
            }
            if e.data_offset() % nn != 0 {
                return Err(format!(
                    "{}: data at offset {} is not a multiple of {n}",
                    newc::short_name(&e.name),
                    e.data_offset()
                ));
            }
        }
    }
    if reported != predicted {
        let names = |v: &Vec<Vec<u8>>| {
            v.iter()
                .map(|n| newc::short_name(n))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(format!(
            "missed set: reported [{}], predicted [{}]",
            names(&reported),
            names(&predicted)
        ));
    }
    // Without the name padding it is the oracle's archive.
    let stripped = newc::strip_name_padding(got, &archive);
    same_bytes(
        plain,
        &stripped,
        &format!("composer -a {n} with name padding removed"),
    )?;
    // And the whole thing is what the rule makes of the oracle's archive.
    let plain_archive = newc::parse(plain).map_err(|e| format!("oracle archive: {e}"))?;
    let (model, _) = align_model(plain, &plain_archive, n);
    match newc::explain_difference(
        &model,
        got,
        "rule applied to gen_init_cpio",
        &format!("composer -a {n}"),
    ) {
        None => Ok(()),
        Some(msg) => Err(msg),
    }
}

fn aligned_run(ctx: &Ctx, l: &ListFile, n: u32, csum: bool) -> Result<(), String> {
    let t = t_arg();
    let ns = n.to_string();
    let mut flags = vec!["-t", t.as_str()];
    if csum {
        flags.push("-c");
    }
    let plain = oracle(ctx, l, &flags);
    flags.extend(["-a", ns.as_str()]);
    let (cmd, out) = composer(ctx, l, "gen-init-cpio", &with_list(&flags, &l.path), None);
    succeeded(&format!("gen-init-cpio -a {n}"), &cmd, &out)?;
    check_aligned(&plain, &out.stdout, &out.stderr, n)
        .map_err(|e| format!("-a {n}{}: {e}", if csum { " -c" } else { "" }))
}

#[test]
fn aligned_4() {
    let Some(ctx) = ctx() else { return };
    for_each_list("gen-init-cpio -a 4", |l| aligned_run(&ctx, l, 4, false));
}

#[test]
fn aligned_512() {
    let Some(ctx) = ctx() else { return };
    for_each_list("gen-init-cpio -a 512", |l| aligned_run(&ctx, l, 512, false));
}

#[test]
fn aligned_4096() {
    let Some(ctx) = ctx() else { return };
    for_each_list("gen-init-cpio -a 4096", |l| {
        aligned_run(&ctx, l, 4096, false)
    });
}

#[test]
fn aligned_65536() {
    let Some(ctx) = ctx() else { return };
    for_each_list("gen-init-cpio -a 65536", |l| {
        aligned_run(&ctx, l, 65536, false)
    });
}

#[test]
fn aligned_4096_with_checksums() {
    let Some(ctx) = ctx() else { return };
    for_each_list("gen-init-cpio -a 4096 -c", |l| {
        aligned_run(&ctx, l, 4096, true)
    });
}

/// `build -a N` writes the same bytes as `gen-init-cpio -a N`, and `-o` the same as
/// stdout.
#[test]
fn aligned_build_and_output_file_match_stdout() {
    let Some(ctx) = ctx() else { return };
    let dir = support::Scratch::new("compat-build-a");
    let t = t_arg();
    for_each_list("build -a / gen-init-cpio -a -o", |l| {
        for n in ["4096", "65536"] {
            let (cmd, out) = composer(
                &ctx,
                l,
                "gen-init-cpio",
                &with_list(&["-t", &t, "-a", n], &l.path),
                None,
            );
            succeeded("gen-init-cpio -a", &cmd, &out)?;
            let built = dir.join("b.cpio");
            let args: Vec<&OsStr> = vec![
                "--list".as_ref(),
                l.path.as_os_str(),
                "-o".as_ref(),
                built.as_os_str(),
                "-t".as_ref(),
                t.as_ref(),
                "-a".as_ref(),
                n.as_ref(),
            ];
            let (cmd, bout) = composer(&ctx, l, "build", &args, None);
            succeeded("build -a", &cmd, &bout)?;
            let got = fs::read(&built).map_err(|e| e.to_string())?;
            if let Some(msg) =
                newc::explain_difference(&out.stdout, &got, "gen-init-cpio -a (stdout)", "build -a")
            {
                return Err(format!("-a {n}: {msg}"));
            }
            let file = dir.join("o.cpio");
            let args: Vec<&OsStr> = vec![
                "-t".as_ref(),
                t.as_ref(),
                "-a".as_ref(),
                n.as_ref(),
                "-o".as_ref(),
                file.as_os_str(),
                l.path.as_os_str(),
            ];
            let (cmd, oout) = composer(&ctx, l, "gen-init-cpio", &args, None);
            succeeded("gen-init-cpio -a -o", &cmd, &oout)?;
            if oout.stderr != out.stderr {
                return Err(format!(
                    "-a {n}: stderr differs between stdout and -o runs:\n{}\nvs\n{}",
                    String::from_utf8_lossy(&out.stderr),
                    String::from_utf8_lossy(&oout.stderr)
                ));
            }
            let got = fs::read(&file).map_err(|e| e.to_string())?;
            if let Some(msg) = newc::explain_difference(
                &out.stdout,
                &got,
                "gen-init-cpio -a (stdout)",
                "gen-init-cpio -a -o",
            ) {
                return Err(format!("-a {n}: {msg}"));
            }
        }
        Ok(())
    });
}

/// The `-a` checker accepts the rule's own output and rejects broken variants.
#[test]
fn alignment_checker_detects_errors() {
    let Some(ctx) = ctx() else { return };
    let t = t_arg();
    let l = corpus::lists()
        .into_iter()
        .find(|l| l.name.starts_with("19-"))
        .unwrap();
    let plain = oracle(&ctx, &l, &["-t", &t]);
    let archive = newc::parse(&plain).unwrap();
    let (good, missed) = align_model(&plain, &archive, 4096);
    assert!(!missed.is_empty(), "19- should miss at 4096");
    let mut stderr = Vec::new();
    for m in &missed {
        stderr.extend_from_slice(m);
        stderr.extend_from_slice(b": best-effort alignment 4096 missed\n");
    }
    check_aligned(&plain, &good, &stderr, 4096).unwrap();
    // A missed entry not reported.
    let cut = stderr.iter().position(|&b| b == b'\n').unwrap() + 1;
    let err = check_aligned(&plain, &good, &stderr[cut..], 4096).unwrap_err();
    assert!(err.contains("missed set"), "{err}");
    // No alignment at all.
    let err = check_aligned(&plain, &plain, &stderr, 4096).unwrap_err();
    assert!(err.contains("name padding 0 instead of"), "{err}");
    // Padding on an entry that must not be padded (the directory /deep).
    let mut bad = Vec::new();
    for (i, e) in newc::parse(&good).unwrap().entries.iter().enumerate() {
        let pad = if i == 0 { 4 } else { e.name_pad() };
        newc::write_entry(&mut bad, e.crc, &e.hdr, &e.name, pad, &good[e.data.clone()]);
    }
    newc::write_trailer(&mut bad, false);
    let err = check_aligned(&plain, &bad, &stderr, 4096).unwrap_err();
    assert!(err.contains("bytes of name padding"), "{err}");
    // One data byte changed.
    let mut bad = good.clone();
    let e = newc::parse(&good)
        .unwrap()
        .entries
        .into_iter()
        .find(|e| e.hdr.filesize > 0)
        .unwrap();
    bad[e.data.start] ^= 0x20;
    let err = check_aligned(&plain, &bad, &stderr, 4096).unwrap_err();
    assert!(err.contains("data byte 0"), "{err}");
}

/// Sanity of the corpus itself: every fixture location is a real file.
#[test]
fn fixtures_exist() {
    let fixtures = corpus::fixtures();
    let vars = corpus::env_vars(fixtures);
    for l in corpus::lists() {
        for e in corpus::parse_list(&l.bytes, &vars) {
            if let Kind::File { location, .. } = &e.kind {
                let p = Path::new(OsStr::from_bytes(location));
                let data = fs::read(p)
                    .unwrap_or_else(|err| panic!("{}:{}: {}: {err}", l.name, e.line, p.display()));
                assert_eq!(
                    data,
                    corpus::content_of(location, fixtures),
                    "{}",
                    p.display()
                );
            }
        }
    }
}
