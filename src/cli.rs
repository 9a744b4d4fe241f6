//! Command-line definitions and subcommands.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::entry::display_name;
use crate::error::{Error, Result};
use crate::legacy::ListOptions;
use crate::manifest::LoadOptions;
use crate::pipeline::{self, BuildReport};
use crate::plan::{MtimePolicy, PlanOptions};

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
    /// Print the manifest's JSON Schema.
    Schema,
    /// A drop-in for the kernel's usr/gen_init_cpio: same arguments, same bytes.
    #[command(name = "gen-init-cpio")]
    GenInitCpio(GenInitCpioArgs),
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
    /// Align file data larger than ALIGN bytes to ALIGN (a power of two, or 0
    /// for none), by gen_init_cpio's rule: pad the file's own name.
    #[arg(short = 'a', long = "data-align", value_name = "ALIGN")]
    pub align: Option<String>,
    /// Read the list exactly as gen_init_cpio does, traps included.
    #[arg(long)]
    pub compat: bool,
    /// Do not fsync the archive before renaming it into place.
    #[arg(long)]
    pub no_sync: bool,
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
    }
    pipeline::prepare_manifest(manifest, &vars.load_options()?, &overrides, output)
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Build(args) => {
            let report = match (&args.manifest, &args.list) {
                (_, Some(list)) => build_list(list, &args.output, &args.archive, true)?,
                (Some(m), None) => {
                    let b = prepare(m, &args.vars, Some(&args.archive), Some(&args.output))?;
                    let mut report = pipeline::write_entries(
                        &b.lowered.entries,
                        &b.opts,
                        &args.output,
                        !args.archive.no_sync,
                    )?;
                    let mut w = b.lowered.warnings;
                    w.append(&mut report.warnings);
                    report.warnings = w;
                    report
                }
                (None, None) => return Err(Error::usage("name a manifest or --list LIST")),
            };
            print_report(&report);
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
        }
        Command::ExportList(args) => {
            let b = prepare(&args.manifest, &args.vars, None, None)?;
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
        Command::Schema => {
            emit(crate::manifest::schema_json().as_bytes(), None)?;
        }
        Command::GenInitCpio(args) => {
            let output = args.output.unwrap_or_else(|| PathBuf::from("-"));
            let report = build_list(&args.list, &output, &args.archive, false)?;
            print_report(&report);
        }
    }
    Ok(())
}
