//! Command-line definitions and subcommands.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::entry::display_name;
use crate::error::{Error, Result};
use crate::legacy::ListOptions;
use crate::manifest::LoadOptions;
use crate::pipeline::{self, BuildReport};
use crate::plan::{AlignMode, MtimePolicy, PlanOptions};

#[derive(Parser, Debug)]
#[command(
    name = "composer",
    version,
    about = "Compose initramfs images: block-aligned newc cpio archives from a manifest or a gen_init_cpio list"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build an archive from a manifest (TOML or YAML) or a gen_init_cpio list.
    Build(BuildArgs),
    /// Load and resolve a manifest without writing anything.
    Check(CheckArgs),
    /// Print a manifest's entries as a gen_init_cpio list.
    #[command(name = "export-list")]
    ExportList(ExportArgs),
    /// Print a manifest equivalent to a gen_init_cpio list.
    #[command(name = "import-list")]
    ImportList(ImportArgs),
    /// Print the layout a build would write: offsets, padding, alignment.
    Plan(PlanArgs),
    /// Print the files programs need (themselves, their loader, their
    /// libraries, symlinks on the way), found as the dynamic loader would,
    /// inside a root, without running them.
    Deps(DepsArgs),
    /// Print the manifest's JSON Schema.
    Schema,
    /// A drop-in for the kernel's usr/gen_init_cpio: same arguments, same bytes.
    #[command(name = "gen-init-cpio")]
    GenInitCpio(GenInitCpioArgs),
    /// List the entries of any initrd: every segment, every compression.
    Inspect(InspectArgs),
    /// Report everything the kernel would silently drop or reject in an initrd.
    Verify(VerifyArgs),
    /// Unpack an initrd into a new or empty directory, never writing outside it.
    Extract(ExtractArgs),
    /// Show what differs between two initrds, entry by entry.
    Diff(DiffArgs),
    /// Explain why an entry, kernel module or firmware file is in a
    /// manifest's image; without a target, list its modules and firmware by size.
    Why(WhyArgs),
}

#[derive(Args, Debug)]
pub struct WhyArgs {
    /// `PATH MANIFEST` or `MANIFEST [PATH]`: the manifest (.toml, .yaml,
    /// .yml) and an image path, a module name (`ext4`) or a firmware name.
    #[arg(value_name = "ARGS", num_args = 1..=2, required = true)]
    pub args: Vec<String>,
    #[command(flatten)]
    pub vars: ManifestArgs,
}

/// Options shared by every command that writes an archive.
#[derive(Args, Debug)]
pub struct ArchiveArgs {
    /// mtime (seconds since the epoch) for every entry, files included.
    /// Without it, files keep their source's mtime and other entries get
    /// SOURCE_DATE_EPOCH if set (build only), else the current time.
    #[arg(short = 't', value_name = "MTIME", allow_hyphen_values = true)]
    pub mtime: Option<String>,
    /// Write 070702 headers with 32-bit data checksums.
    #[arg(short = 'c')]
    pub crc: bool,
    /// Align the data of files larger than ALIGN bytes to ALIGN (a power of
    /// two, or 0 for none).
    #[arg(short = 'a', long = "data-align", value_name = "ALIGN")]
    pub align: Option<String>,
    /// How to reach alignment: `readers` (reorder and pad names so that
    /// every reader extracts the archive; the default for manifests),
    /// `kernel-only` (NUL runs between entries, which only the kernel
    /// accepts), or `gen-init-cpio` (its rule: pad only the file's own name,
    /// keep the order, miss past PATH_MAX; the default for lists).
    #[arg(long, value_enum, value_name = "MODE")]
    pub align_mode: Option<AlignModeArg>,
    /// Read the list exactly as gen_init_cpio does, traps included.
    #[arg(long)]
    pub compat: bool,
    /// Do not fsync the archive before renaming it into place.
    #[arg(long)]
    pub no_sync: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlignModeArg {
    Readers,
    KernelOnly,
    GenInitCpio,
}

impl From<AlignModeArg> for AlignMode {
    fn from(a: AlignModeArg) -> Self {
        match a {
            AlignModeArg::Readers => AlignMode::Readers,
            AlignModeArg::KernelOnly => AlignMode::KernelOnly,
            AlignModeArg::GenInitCpio => AlignMode::GenInitCpio,
        }
    }
}

/// Options for reading a manifest.
#[derive(Args, Debug, Default)]
pub struct ManifestArgs {
    /// Kernel version for `${kver}` (default: the running kernel's).
    #[arg(long, value_name = "VERSION")]
    pub kver: Option<String>,
    /// Set a variable for `${NAME}` (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Source root: look up every source path inside this directory.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
}

impl ManifestArgs {
    fn load_options(&self) -> Result<LoadOptions> {
        let mut set = Vec::new();
        for s in &self.set {
            let Some((k, v)) = s.split_once('=') else {
                return Err(Error::usage(format!("--set `{s}` is not NAME=VALUE"))
                    .with_hint("e.g. --set flavour=generic"));
            };
            set.push((k.to_string(), v.to_string()));
        }
        Ok(LoadOptions {
            kver: self.kver.clone(),
            set,
            root: self.root.clone(),
        })
    }
}

#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The manifest to build (.toml, .yaml or .yml).
    #[arg(
        value_name = "MANIFEST",
        required_unless_present = "list",
        conflicts_with = "list"
    )]
    pub manifest: Option<PathBuf>,
    /// Build a gen_init_cpio list instead (`-` for standard input).
    #[arg(long, value_name = "LIST")]
    pub list: Option<PathBuf>,
    #[command(flatten)]
    pub vars: ManifestArgs,
    /// Where to write the archive (`-` for standard output).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    #[command(flatten)]
    pub archive: ArchiveArgs,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[arg(value_name = "MANIFEST")]
    pub manifest: PathBuf,
    #[command(flatten)]
    pub vars: ManifestArgs,
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The manifest to plan.
    #[arg(
        value_name = "MANIFEST",
        required_unless_present = "list",
        conflicts_with = "list"
    )]
    pub manifest: Option<PathBuf>,
    /// Plan a gen_init_cpio list instead.
    #[arg(long, value_name = "LIST")]
    pub list: Option<PathBuf>,
    /// Where the archive would go, for `align = "auto"` (default: the
    /// current directory).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print only the totals.
    #[arg(long)]
    pub summary: bool,
    #[command(flatten)]
    pub archive: ArchiveArgs,
    #[command(flatten)]
    pub vars: ManifestArgs,
}

#[derive(Args, Debug)]
pub struct DepsArgs {
    /// Programs by name (looked up on the search path) or path, inside the root.
    #[arg(value_name = "PROGRAM", required = true)]
    pub programs: Vec<PathBuf>,
    /// Look everything up inside this directory.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Also take the glibc-hwcaps variants this CPU supports.
    #[arg(long)]
    pub hwcaps: bool,
    /// `.note.dlopen` dependencies: none, required, recommended, suggested.
    #[arg(long, value_name = "LEVEL", default_value = "recommended")]
    pub dlopen: String,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[arg(value_name = "MANIFEST")]
    pub manifest: PathBuf,
    /// Write the list here instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub vars: ManifestArgs,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The gen_init_cpio list (`-` for standard input).
    #[arg(value_name = "LIST")]
    pub list: PathBuf,
    /// Write the manifest here instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct GenInitCpioArgs {
    /// Write the archive to FILE instead of standard output.
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub archive: ArchiveArgs,
    /// The list (`-` for standard input).
    #[arg(value_name = "LIST")]
    pub list: PathBuf,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The image (`-` for standard input).
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
    /// Show mode, links, owner, size, mtime (UTC) and data offset.
    #[arg(short = 'l', long)]
    pub long: bool,
    /// Show the segments: offset, length, compression, size, entries.
    #[arg(long)]
    pub segments: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The image (`-` for standard input).
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
}

#[derive(Args, Debug)]
pub struct ExtractArgs {
    /// The image (`-` for standard input).
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
    /// The directory to create (it may exist if empty).
    #[arg(short = 'C', long = "directory", value_name = "DIR")]
    pub dir: PathBuf,
    /// Create block and character device nodes (needs root).
    #[arg(long)]
    pub devices: bool,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    #[arg(value_name = "A")]
    pub a: PathBuf,
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Report differing mtimes too.
    #[arg(long)]
    pub mtime: bool,
}

/// `-t`: a decimal number of seconds that fits the 32-bit header field.
pub fn parse_mtime(text: &str) -> Result<u32> {
    let value: i64 = text.trim_start().parse().map_err(|_| {
        Error::usage(format!("invalid timestamp `-t {text}`"))
            .with_hint("give seconds since the epoch, e.g. -t 0 or -t \"$SOURCE_DATE_EPOCH\"")
    })?;
    u32::try_from(value).map_err(|_| {
        Error::usage(format!(
            "timestamp {value} is out of range for the cpio format (0 to {})",
            u32::MAX
        ))
        .with_hint("cpio mtimes are 32-bit: dates from 1970 to 2106")
    })
}

/// `-a`: 0 (off) or a power of two of at least 4.
pub fn parse_align(text: &str) -> Result<u32> {
    let value: u32 = text.parse().map_err(|_| {
        Error::usage(format!("invalid alignment `-a {text}`"))
            .with_hint("give a number of bytes, e.g. -a 4096")
    })?;
    if value != 0 && (value < 4 || !value.is_power_of_two()) {
        return Err(Error::usage(format!(
            "alignment {value} is not a power of two (of at least 4)"
        ))
        .with_hint("use the filesystem's block size, e.g. -a 4096"));
    }
    Ok(value)
}

fn plan_options(args: &ArchiveArgs, source_date_epoch: bool) -> Result<PlanOptions> {
    let mut fixed = args.mtime.as_deref().map(parse_mtime).transpose()?;
    if fixed.is_none() && source_date_epoch {
        if let Ok(sde) = std::env::var("SOURCE_DATE_EPOCH") {
            fixed =
                Some(parse_mtime(&sde).map_err(|e| {
                    e.with_hint("SOURCE_DATE_EPOCH must be seconds since the epoch")
                })?);
        }
    }
    Ok(PlanOptions {
        crc: args.crc,
        align: args
            .align
            .as_deref()
            .map(parse_align)
            .transpose()?
            .unwrap_or(0),
        mtime: MtimePolicy {
            fixed,
            now: pipeline::now(),
        },
        // A list keeps its order and gen_init_cpio's rule unless asked.
        mode: args
            .align_mode
            .map_or(AlignMode::GenInitCpio, AlignMode::from),
    })
}

fn build_list(
    list: &std::path::Path,
    output: &std::path::Path,
    args: &ArchiveArgs,
    source_date_epoch: bool,
) -> Result<BuildReport> {
    let opts = plan_options(args, source_date_epoch)?;
    let list_opts = ListOptions {
        compat: args.compat,
        ..ListOptions::default()
    };
    let mut parsed = pipeline::read_list(list, &list_opts)?;
    let mut report = pipeline::build_entries(
        &mut parsed.entries,
        args.compat,
        &opts,
        output,
        !args.no_sync,
    )?;
    parsed.warnings.append(&mut report.warnings);
    report.warnings = parsed.warnings;
    Ok(report)
}

fn print_report(report: &BuildReport) {
    let mut err = std::io::stderr().lock();
    for w in &report.warnings {
        let _ = writeln!(err, "composer: warning: {w}");
    }
    for (name, align) in &report.misses {
        // gen_init_cpio's own words, so scripts that look for them still work.
        let _ = writeln!(
            err,
            "{}: best-effort alignment {align} missed",
            display_name(name)
        );
    }
}

/// Writes `bytes` to `output` atomically, or to standard output.
fn emit(bytes: &[u8], output: Option<&std::path::Path>) -> Result<()> {
    let target = output.unwrap_or(std::path::Path::new("-"));
    let out = crate::output::Output::create(target)?;
    let mut f = out.file();
    f.write_all(bytes).map_err(|e| Error::io(out.name(), e))?;
    out.commit(false)
}

fn prepare(
    manifest: &std::path::Path,
    vars: &ManifestArgs,
    archive: Option<&ArchiveArgs>,
    output: Option<&std::path::Path>,
) -> Result<pipeline::ManifestBuild> {
    let mut overrides = pipeline::Overrides::default();
    if let Some(a) = archive {
        overrides.mtime = a.mtime.as_deref().map(parse_mtime).transpose()?;
        overrides.align = a.align.as_deref().map(parse_align).transpose()?;
        overrides.crc = a.crc;
        overrides.mode = a.align_mode.map(AlignMode::from);
    }
    pipeline::prepare_manifest(manifest, &vars.load_options()?, &overrides, output)
}

/// One line on an image's segments and early files, for `check` and
/// `export-list`.
fn segments_line(b: &pipeline::ManifestBuild) -> String {
    let segs = &b.segments;
    let parts: Vec<String> = segment_names(segs, &b.lowered.entries);
    let early_files = segs
        .early_entries
        .iter()
        .filter(|e| matches!(e.kind, crate::entry::Kind::File { .. }))
        .count();
    let mut line = format!("segments: {}", parts.join(", "));
    if early_files > 0 {
        line.push_str(&format!(
            "; the early segment adds {early_files} file{} (microcode, ACPI tables)",
            if early_files == 1 { "" } else { "s" }
        ));
    }
    line
}

/// `name (compression, N entries)` for every segment the image will have.
fn segment_names(segs: &crate::segment::Segments, entries: &[crate::entry::Entry]) -> Vec<String> {
    segs.present(entries)
        .iter()
        .map(|(k, list)| {
            let spec = &segs.specs[*k];
            format!(
                "{} ({}, {} entries)",
                spec.name,
                spec.compression.name(),
                list.len()
            )
        })
        .collect()
}

/// `composer plan` of one plain archive.
fn plan_text(entries: &[crate::entry::Entry], opts: &PlanOptions, args: &PlanArgs) -> String {
    use crate::plan::report;
    let layout = crate::plan::plan(entries, opts);
    let summary = report::summarize(&layout, entries);
    if args.json {
        report::render_json(&layout, &summary)
    } else if args.summary {
        report::summary_text(&summary)
    } else {
        report::render_text(&layout, &summary)
    }
}

/// `composer plan` of an image of several segments, planned as the build
/// writes them.
fn segments_plan_text(b: &pipeline::ManifestBuild, args: &PlanArgs) -> String {
    use crate::plan::report::{self, SegmentView};
    use crate::segment;
    let parts = segment::parts(&b.segments, &b.lowered.entries, &b.opts);
    let planned = segment::plan_parts(&b.segments, &parts);
    let views: Vec<SegmentView> = planned
        .iter()
        .map(|p| SegmentView {
            name: &b.segments.specs[p.part.spec].name,
            compression: b.segments.specs[p.part.spec].compression,
            start: p.start,
            start_align: p.part.start_align,
            layout: &p.layout,
            summary: report::summarize(&p.layout, &p.part.entries),
        })
        .collect();
    if args.json {
        report::render_segments_json(&views)
    } else {
        report::render_segments_text(&views, args.summary)
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Build(args) => {
            let report = match (&args.manifest, &args.list) {
                (_, Some(list)) => build_list(list, &args.output, &args.archive, true)?,
                (Some(m), None) => {
                    let b = prepare(m, &args.vars, Some(&args.archive), Some(&args.output))?;
                    let mut report =
                        pipeline::write_manifest(&b, &args.output, !args.archive.no_sync)?;
                    let mut w = b.lowered.warnings;
                    w.append(&mut report.warnings);
                    report.warnings = w;
                    report
                }
                (None, None) => return Err(Error::usage("name a manifest or --list LIST")),
            };
            print_report(&report);
        }
        Command::Why(args) => {
            let is_manifest =
                |a: &String| [".toml", ".yaml", ".yml"].iter().any(|e| a.ends_with(e));
            let (manifest, target) = match args.args.as_slice() {
                [m] => (m.clone(), None),
                [a, b] if is_manifest(b) && !is_manifest(a) => (b.clone(), Some(a.clone())),
                [a, b] => (a.clone(), Some(b.clone())),
                _ => return Err(Error::usage("usage: composer why PATH MANIFEST")),
            };
            let b = prepare(std::path::Path::new(&manifest), &args.vars, None, None)?;
            for w in &b.lowered.warnings {
                eprintln!("composer: warning: {w}");
            }
            // [early] files are part of the image too.
            let early = &b.segments.early_entries;
            let all: std::borrow::Cow<[crate::entry::Entry]> = if early.is_empty() {
                std::borrow::Cow::Borrowed(&b.lowered.entries)
            } else {
                std::borrow::Cow::Owned(early.iter().chain(&b.lowered.entries).cloned().collect())
            };
            let mut text = crate::manifest::modules::why(&all, target.as_deref())?;
            // For files that binaries brought in: every chain of loads.
            if let (Some(t), Some(res)) = (target.as_deref(), &b.lowered.elf) {
                let path = std::path::Path::new("/").join(t.trim_start_matches('/'));
                for chain in res.why(&path) {
                    text.push_str("  ");
                    text.push_str(&res.render_chain(&chain));
                    text.push('\n');
                }
            }
            emit(text.as_bytes(), None)?;
        }
        Command::Check(args) => {
            let b = prepare(&args.manifest, &args.vars, None, None)?;
            let entries = &b.lowered.entries;
            let files = entries
                .iter()
                .filter(|e| matches!(e.kind, crate::entry::Kind::File { .. }))
                .count();
            let bytes: u64 = entries
                .iter()
                .filter_map(|e| match &e.kind {
                    crate::entry::Kind::File { source, .. } => Some(source.size),
                    _ => None,
                })
                .sum();
            for w in &b.lowered.warnings {
                eprintln!("composer: warning: {w}");
            }
            println!(
                "{}: ok, {} entries ({files} files, {bytes} bytes of file data)",
                args.manifest.display(),
                entries.len()
            );
            if !b.segments.is_plain() {
                println!("{}", segments_line(&b));
            }
        }
        Command::ExportList(args) => {
            let b = prepare(&args.manifest, &args.vars, None, None)?;
            if !b.segments.is_plain() {
                eprintln!(
                    "composer: warning: {}: a gen_init_cpio list is one uncompressed archive \
                     of the manifest's own entries, without the early files and without \
                     segments ({}); build the image with `composer build`",
                    args.manifest.display(),
                    segments_line(&b)
                );
            }
            let list = crate::legacy::write_list(&b.lowered.entries)?;
            emit(&list, args.output.as_deref())?;
        }
        Command::ImportList(args) => {
            let parsed = pipeline::read_list(&args.list, &ListOptions::default())?;
            let text = crate::manifest::import::manifest_from_entries(
                &parsed.entries,
                &args.list.display().to_string(),
            );
            emit(text.as_bytes(), args.output.as_deref())?;
        }
        Command::Plan(args) => {
            let text = match (&args.manifest, &args.list) {
                (_, Some(list)) => {
                    let opts = plan_options(&args.archive, true)?;
                    let list_opts = ListOptions {
                        compat: args.archive.compat,
                        ..ListOptions::default()
                    };
                    let mut parsed = pipeline::read_list(list, &list_opts)?;
                    crate::resolve::stat_sources(&mut parsed.entries, args.archive.compat)?;
                    plan_text(&parsed.entries, &opts, &args)
                }
                (Some(m), None) => {
                    // align = "auto" needs the output's filesystem: without -o,
                    // plan for the current directory's, and say so.
                    let here = std::path::Path::new("composer-plan.img");
                    let out = args.output.as_deref().unwrap_or(here);
                    let b = prepare(m, &args.vars, Some(&args.archive), Some(out))?;
                    if args.output.is_none()
                        && args.archive.align.is_none()
                        && b.lowered.align == crate::manifest::DefaultAlign::Auto
                    {
                        eprintln!(
                            "composer: note: align = \"auto\" is the block size of the \
                             output's filesystem; planned for the current directory's \
                             ({} bytes); pass -o OUT to plan for another place",
                            b.opts.align
                        );
                    }
                    if b.segments.is_plain() {
                        plan_text(&b.lowered.entries, &b.opts, &args)
                    } else {
                        segments_plan_text(&b, &args)
                    }
                }
                (None, None) => return Err(Error::usage("name a manifest or --list LIST")),
            };
            emit(text.as_bytes(), None)?;
        }
        Command::Deps(args) => {
            use crate::resolve::elf::{self, BinaryRequest, ElfOptions, Hwcaps};
            let mut opts = ElfOptions::new(&args.root);
            if args.hwcaps {
                opts.hwcaps = Hwcaps::Host;
            }
            opts.dlopen = args.dlopen.parse().map_err(|e: String| {
                Error::usage(format!("--dlopen {}: {e}", args.dlopen))
                    .with_hint("one of none, required, recommended, suggested")
            })?;
            let requests: Vec<BinaryRequest> =
                args.programs.iter().map(BinaryRequest::program).collect();
            let res = elf::resolve(&requests, &opts)?;
            for w in &res.warnings {
                eprintln!("composer: warning: {w}");
            }
            let mut text = String::new();
            for p in res.paths() {
                text.push_str(&p.display().to_string());
                text.push('\n');
            }
            emit(text.as_bytes(), None)?;
        }
        Command::Schema => {
            emit(crate::manifest::schema_json().as_bytes(), None)?;
        }
        Command::GenInitCpio(args) => {
            let output = args.output.unwrap_or_else(|| PathBuf::from("-"));
            let report = build_list(&args.list, &output, &args.archive, false)?;
            print_report(&report);
        }
        Command::Inspect(args) => {
            let opts = crate::image::inspect::InspectOptions {
                long: args.long,
                segments: args.segments,
                json: args.json,
            };
            crate::image::inspect::run(&args.image, &opts)?;
        }
        Command::Verify(args) => crate::image::verify::run(&args.image)?,
        Command::Extract(args) => {
            let opts = crate::extract::ExtractOptions {
                devices: args.devices,
            };
            crate::extract::run(&args.image, &args.dir, &opts)?;
        }
        Command::Diff(args) => crate::image::diff::run(&args.a, &args.b, args.mtime)?,
    }
    Ok(())
}
