//! The build's policy: mtimes, data alignment, checksums. Decided once, in
//! [`decide`], from the command line, the manifest (or list) and the
//! environment, in that order of precedence; everything after lowering
//! reads the [`Policy`] it returns.

use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::{Error, Result};

/// How the planner may reach alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize, JsonSchema, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum AlignMode {
    /// Reorder, fill gaps with small entries, spread padding over names and
    /// repeated directory entries: archives every reader extracts.
    #[default]
    Readers,
    /// Like `readers`, but pad with NUL bytes between entries, which only
    /// the kernel's unpacker accepts.
    KernelOnly,
    /// gen_init_cpio's rule: keep the order, pad only the file's own name,
    /// miss when that would pass PATH_MAX.
    GenInitCpio,
}

/// How entry mtimes are chosen when an entry has none of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtimePolicy {
    /// `-t` (or SOURCE_DATE_EPOCH, or the manifest's fixed mtime): every
    /// entry, files included, gets this mtime, whatever its own.
    pub fixed: Option<u32>,
    /// Otherwise, the mtime of entries that have none (gen_init_cpio uses
    /// the current time). Files keep their source's mtime, clamped to 32
    /// bits.
    pub now: u32,
}

/// Everything the planner and writer are told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Write `070702` headers with data checksums.
    pub crc: bool,
    /// Default data alignment in bytes; 0 for none.
    pub align: u32,
    pub mtime: MtimePolicy,
    pub mode: AlignMode,
    /// `align` is the block size of the output's filesystem (a manifest's
    /// `align = "auto"`).
    pub auto_align: bool,
    /// Let the writer share data with the sources (copy_file_range);
    /// false copies through memory.
    pub reflink: bool,
}

/// What the command line says (each `None` leaves the choice to the input).
#[derive(Clone, Copy, Debug, Default)]
pub struct Overrides {
    /// `-t`.
    pub mtime: Option<u32>,
    /// `-a`.
    pub align: Option<u32>,
    /// `-c`.
    pub crc: bool,
    /// `--align-mode`.
    pub mode: Option<AlignMode>,
    /// `--no-reflink`.
    pub no_reflink: bool,
}

/// A manifest's `defaults.align`: bytes, none, or the block size of the
/// output's filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlignChoice {
    None,
    Bytes(u32),
    Auto,
}

/// A manifest's `defaults.mtime`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtimeChoice {
    /// Keep the sources' mtimes (SOURCE_DATE_EPOCH, when set, wins).
    Source,
    /// SOURCE_DATE_EPOCH, which must be set.
    SourceDateEpoch,
    Fixed(u32),
}

/// What the input itself asks for.
#[derive(Clone, Copy, Debug)]
pub enum Asked {
    /// A manifest's merged `[defaults]` and `[image]` settings.
    Manifest {
        mtime: MtimeChoice,
        align: AlignChoice,
        mode: Option<AlignMode>,
        reflink: Option<bool>,
    },
    /// A gen_init_cpio list: its order and rule unless told otherwise;
    /// `source_date_epoch` says whether SOURCE_DATE_EPOCH applies (build
    /// does, the gen_init_cpio drop-in does not, as the kernel tool).
    List { source_date_epoch: bool },
}

/// The environment a policy depends on, read once.
#[derive(Clone, Debug, Default)]
pub struct Environment {
    pub source_date_epoch: Option<String>,
    /// The current time as a cpio mtime.
    pub now: u32,
}

impl Environment {
    /// SOURCE_DATE_EPOCH and the clock of this process.
    pub fn current() -> Environment {
        Environment {
            source_date_epoch: std::env::var("SOURCE_DATE_EPOCH").ok(),
            now: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs().min(u32::MAX as u64) as u32)
                .unwrap_or(0),
        }
    }

    fn source_date_epoch(&self) -> Result<Option<u32>> {
        self.source_date_epoch
            .as_deref()
            .map(|s| {
                parse_mtime(s.trim()).map_err(|e| {
                    e.with_hint(
                        "SOURCE_DATE_EPOCH must be seconds since the epoch (0 to 4294967295)",
                    )
                })
            })
            .transpose()
    }
}

/// Decides the policy. `output` is where the archive will go (for
/// `align = "auto"`); None plans for no particular place (alignment off).
pub fn decide(
    cli: &Overrides,
    asked: Asked,
    env: &Environment,
    output: Option<&Path>,
) -> Result<Policy> {
    let mut auto_align = false;
    let mut reflink = true;
    let (fixed, now, align, mode) = match asked {
        Asked::Manifest {
            mtime,
            align,
            mode,
            reflink: asked_reflink,
        } => {
            reflink = asked_reflink.unwrap_or(true);
            let fixed = match mtime {
                MtimeChoice::Fixed(t) => Some(t),
                MtimeChoice::Source => env.source_date_epoch()?,
                MtimeChoice::SourceDateEpoch => match env.source_date_epoch()? {
                    Some(t) => Some(t),
                    None => return Err(Error::usage(
                        "defaults.mtime is \"source-date-epoch\" but SOURCE_DATE_EPOCH is not set",
                    )
                    .with_hint(
                        "export SOURCE_DATE_EPOCH=<seconds>, or choose another mtime policy",
                    )),
                },
            };
            let align = match (cli.align, align) {
                (Some(a), _) => a,
                (None, AlignChoice::None) => 0,
                (None, AlignChoice::Bytes(n)) => n,
                (None, AlignChoice::Auto) => {
                    auto_align = true;
                    output.map_or(Ok(0), block_size_for)?
                }
            };
            (fixed, 0, align, mode.unwrap_or(AlignMode::Readers))
        }
        Asked::List { source_date_epoch } => {
            let fixed = if source_date_epoch {
                env.source_date_epoch()?
            } else {
                None
            };
            // A list keeps its order and gen_init_cpio's rule unless asked.
            (
                fixed,
                env.now,
                cli.align.unwrap_or(0),
                AlignMode::GenInitCpio,
            )
        }
    };
    Ok(Policy {
        crc: cli.crc,
        align,
        mtime: MtimePolicy {
            fixed: cli.mtime.or(fixed),
            now,
        },
        mode: cli.mode.unwrap_or(mode),
        auto_align,
        reflink: reflink && !cli.no_reflink,
    })
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
    let value: u64 = text.parse().map_err(|_| {
        Error::usage(format!("invalid alignment `-a {text}`"))
            .with_hint("give a number of bytes, e.g. -a 4096")
    })?;
    let max = 1u64 << 31;
    if value != 0 && (value < 4 || !value.is_power_of_two() || value > max) {
        let why = if value > max {
            format!("alignment {value} is larger than {max}, the largest power of two a cpio size field can hold")
        } else {
            format!("alignment {value} is not a power of two (of at least 4)")
        };
        return Err(Error::usage(why).with_hint("use the filesystem's block size, e.g. -a 4096"));
    }
    Ok(value as u32)
}

/// The block size of the filesystem an output file will live on (4096
/// where it cannot be told).
pub fn block_size_for(output: &Path) -> Result<u32> {
    if output == Path::new("-") {
        return Ok(0);
    }
    let dir = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let st = match rustix::fs::statfs(dir) {
        Ok(st) => st,
        // Not there yet (a plan for /boot of a root without one): the
        // common block size; a build fails on the missing directory anyway.
        Err(rustix::io::Errno::NOENT) => return Ok(4096),
        Err(e) => return Err(Error::io(dir, e.into())),
    };
    let bsize = st.f_bsize as u64;
    Ok(
        if bsize.is_power_of_two() && (4..=1 << 20).contains(&bsize) {
            bsize as u32
        } else {
            4096
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(sde: Option<&str>) -> Environment {
        Environment {
            source_date_epoch: sde.map(str::to_string),
            now: 77,
        }
    }

    fn manifest(mtime: MtimeChoice) -> Asked {
        Asked::Manifest {
            mtime,
            align: AlignChoice::Bytes(4096),
            mode: None,
            reflink: None,
        }
    }

    #[test]
    fn the_command_line_wins_then_the_input_then_the_environment() {
        let cli = Overrides::default();
        let p = decide(&cli, manifest(MtimeChoice::Source), &env(Some("5")), None).unwrap();
        assert_eq!(
            (p.mtime.fixed, p.align, p.mode),
            (Some(5), 4096, AlignMode::Readers)
        );
        let p = decide(&cli, manifest(MtimeChoice::Fixed(9)), &env(Some("5")), None).unwrap();
        assert_eq!(p.mtime.fixed, Some(9));
        let cli = Overrides {
            mtime: Some(1),
            align: Some(0),
            crc: true,
            mode: Some(AlignMode::KernelOnly),
            no_reflink: true,
        };
        let p = decide(&cli, manifest(MtimeChoice::Fixed(9)), &env(Some("5")), None).unwrap();
        assert_eq!(
            (p.mtime.fixed, p.align, p.mode, p.crc, p.reflink),
            (Some(1), 0, AlignMode::KernelOnly, true, false)
        );
        // reflink: the manifest's choice unless --no-reflink; default on.
        let asked = |reflink| Asked::Manifest {
            mtime: MtimeChoice::Source,
            align: AlignChoice::None,
            mode: None,
            reflink,
        };
        let none = Overrides::default();
        assert!(
            decide(&none, asked(None), &env(None), None)
                .unwrap()
                .reflink
        );
        assert!(
            !decide(&none, asked(Some(false)), &env(None), None)
                .unwrap()
                .reflink
        );
        assert!(
            decide(&none, asked(Some(true)), &env(None), None)
                .unwrap()
                .reflink
        );
        assert!(decide(
            &Overrides::default(),
            manifest(MtimeChoice::SourceDateEpoch),
            &env(None),
            None
        )
        .is_err());
    }

    #[test]
    fn lists_keep_gen_init_cpio_rules() {
        let cli = Overrides::default();
        let build = Asked::List {
            source_date_epoch: true,
        };
        let p = decide(&cli, build, &env(Some("5")), None).unwrap();
        assert_eq!(
            (p.mtime.fixed, p.mtime.now, p.mode),
            (Some(5), 77, AlignMode::GenInitCpio)
        );
        let drop_in = Asked::List {
            source_date_epoch: false,
        };
        let p = decide(&cli, drop_in, &env(Some("5")), None).unwrap();
        assert_eq!(p.mtime.fixed, None);
        assert!(decide(&cli, build, &env(Some("x")), None).is_err());
    }

    #[test]
    fn alignments() {
        assert_eq!(parse_align("0").unwrap(), 0);
        assert_eq!(parse_align("4096").unwrap(), 4096);
        assert!(parse_align("12")
            .unwrap_err()
            .to_string()
            .contains("not a power of two"));
        let big = parse_align("4294967296").unwrap_err().to_string();
        assert!(big.contains("larger than"), "{big}");
        assert!(parse_align("4k").is_err());
    }
}
