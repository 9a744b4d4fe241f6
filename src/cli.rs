//! Command-line definitions and subcommands.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::entry::display_name;
use crate::error::{Error, Result};
use crate::legacy::ListOptions;
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
    /// Build an archive from a gen_init_cpio list.
    Build(BuildArgs),
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
    #[arg(short = 'a', value_name = "ALIGN")]
    pub align: Option<String>,
    /// Read the list exactly as gen_init_cpio does, traps included.
    #[arg(long)]
    pub compat: bool,
    /// Do not fsync the archive before renaming it into place.
    #[arg(long)]
    pub no_sync: bool,
}

#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The gen_init_cpio list to build (`-` for standard input).
    #[arg(long, value_name = "LIST")]
    pub list: PathBuf,
    /// Where to write the archive (`-` for standard output).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    #[command(flatten)]
    pub archive: ArchiveArgs,
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

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Build(args) => {
            let report = build_list(&args.list, &args.output, &args.archive, true)?;
            print_report(&report);
        }
        Command::GenInitCpio(args) => {
            let output = args.output.unwrap_or_else(|| PathBuf::from("-"));
            let report = build_list(&args.list, &output, &args.archive, false)?;
            print_report(&report);
        }
    }
    Ok(())
}
