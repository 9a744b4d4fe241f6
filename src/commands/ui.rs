//! What the commands print, and the standard streams they read and write:
//! text on standard output (a closed pipe is not an error), warnings on
//! standard error, `-` as standard input or output.

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use composer::error::{Error, Result, Warning};
use composer::io::MAX_INPUT;
use composer::write::{BuildReport, Output};

/// A JSON document as text, with a final newline.
pub fn json_text(doc: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(doc).unwrap_or_default();
    s.push('\n');
    s
}

/// Writes finished text to standard output.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::io("<stdout>", e)),
        _ => Ok(()),
    }
}

/// `-q`: only errors go to standard error.
static QUIET: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// `-v`: groups of warnings are shown one by one.
static VERBOSE: AtomicBool = AtomicBool::new(false);

pub fn set_verbose(verbose: bool) {
    VERBOSE.store(verbose, Ordering::Relaxed);
}

pub fn verbose() -> bool {
    VERBOSE.load(Ordering::Relaxed)
}

pub fn warn(w: &impl std::fmt::Display) {
    if !quiet() {
        let _ = writeln!(std::io::stderr().lock(), "composer: warning: {w}");
    }
}

/// Each warning on a line; with `-v` a group is replaced by its members,
/// each at the group's origin.
pub fn warnings(ws: &[Warning]) {
    for w in ws {
        if verbose() && !w.details.is_empty() {
            for d in &w.details {
                warn(&Warning {
                    origin: w.origin.clone(),
                    message: d.clone(),
                    details: Vec::new(),
                });
            }
        } else {
            warn(w);
        }
    }
}

pub fn note(text: &str) {
    if !quiet() {
        let _ = writeln!(std::io::stderr().lock(), "composer: note: {text}");
    }
}

/// A build's warnings, then its alignment misses in gen_init_cpio's own
/// words (so scripts that look for them still work).
pub fn build_report(report: &BuildReport) {
    warnings(&report.warnings);
    let mut err = std::io::stderr().lock();
    for (name, align) in &report.misses {
        let _ = writeln!(
            err,
            "{}: best-effort alignment {align} missed",
            composer::path::escape(name)
        );
    }
}

/// With `-v`, how the data of the uncompressed segments was moved.
pub fn build_details(report: &BuildReport) {
    if !verbose() {
        return;
    }
    let s = &report.stats;
    note(&format!(
        "file data: {} bytes by copy_file_range (shared with the sources where the filesystem can), {} bytes copied through memory, {} bytes of padding left as holes",
        s.copy_file_range_bytes, s.buffered_bytes, s.hole_bytes
    ));
}

/// The line that ends a build (unless `-q`): where, how big, how many
/// entries and segments, how long.
pub fn build_summary(
    out: &Path,
    report: &BuildReport,
    entries: usize,
    segments: usize,
    took: std::time::Duration,
) {
    if quiet() {
        return;
    }
    let where_ = if out == Path::new("-") {
        "standard output".to_string()
    } else {
        out.display().to_string()
    };
    let _ = writeln!(
        std::io::stderr().lock(),
        "composer: wrote {where_}: {} bytes ({:.1} MiB), {entries} entries in {segments} segment{}, {:.2} s",
        report.size,
        report.size as f64 / (1024.0 * 1024.0),
        if segments == 1 { "" } else { "s" },
        took.as_secs_f64()
    );
}

/// Where an archive goes: a file (atomically) or, for `-`, standard output.
pub fn output(target: &Path) -> Result<Output> {
    if target == Path::new("-") {
        let fd = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io("<stdout>", e))?;
        return Ok(Output::stream(std::fs::File::from(fd), "<stdout>"));
    }
    Output::create(target)
}

/// Where an archive goes, as [`output`]; a terminal is refused (an archive
/// is binary data, as gzip and cpio refuse).
pub fn archive_output(target: &Path) -> Result<Output> {
    let out = output(target)?;
    if out.file().is_terminal() {
        return Err(Error::usage(format!(
            "refusing to write an archive to the terminal `{}`",
            out.name()
        ))
        .with_hint("redirect standard output to a file or a pipe, or give -o FILE"));
    }
    Ok(out)
}

/// Writes `bytes` to `target` atomically, or to standard output.
pub fn emit(bytes: &[u8], target: Option<&Path>) -> Result<()> {
    let out = output(target.unwrap_or(Path::new("-")))?;
    let mut f = out.file();
    f.write_all(bytes).map_err(|e| Error::io(out.name(), e))?;
    out.commit(false)
}

/// The bytes of `path`, or of standard input for `-`, and the name to
/// show for it; `what` says what it is in messages.
/// Both are at most 64 MiB (a list is text).
pub fn read_input(path: &Path, what: &str) -> Result<(Vec<u8>, String)> {
    let hint = || format!("a {what} is a text file of at most 64 MiB; check the path");
    if path == Path::new("-") {
        let bytes =
            composer::io::read_limited(&mut std::io::stdin().lock(), MAX_INPUT).map_err(|e| {
                Error::usage(format!("cannot read the {what} on standard input: {e}"))
                    .with_hint(hint())
            })?;
        return Ok((bytes, "<stdin>".to_string()));
    }
    let bytes = composer::io::read_regular(path, MAX_INPUT).map_err(|e| {
        Error::usage(format!("cannot read the {what} `{}`: {e}", path.display())).with_hint(hint())
    })?;
    Ok((bytes, path.display().to_string()))
}

/// Opens an image; `-` is standard input, copied into an unnamed temporary
/// file first (the readers need to read it twice, not to hold it).
pub fn open_image(path: &Path, want: composer::image::Want) -> Result<composer::image::Image> {
    if path == Path::new("-") {
        let mut file = tempfile::tempfile().map_err(|e| Error::io(std::env::temp_dir(), e))?;
        std::io::copy(&mut std::io::stdin().lock(), &mut file)
            .map_err(|e| Error::io("<stdin>", e))?;
        return composer::image::Image::from_file(file, "-".to_string(), want);
    }
    composer::image::Image::open(path, want)
}
