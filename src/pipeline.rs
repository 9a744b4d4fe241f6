//! The stages wired together: read, resolve, plan, write.

use std::io::Read;
use std::path::Path;

use crate::cpio::writer::{self, WriteStats};
use crate::entry::Entry;
use crate::error::{Error, Result, Warning};
use crate::legacy::{self, ListOptions, ParsedList};
use crate::output::Output;
use crate::plan::{self, Alignment, PlanOptions};
use crate::resolve;

/// Reads a list file (`-` is standard input) with the given options.
pub fn read_list(path: &Path, opts: &ListOptions) -> Result<ParsedList> {
    let (bytes, name) = if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| Error::io("<stdin>", e))?;
        (buf, "<stdin>".to_string())
    } else {
        let bytes = std::fs::read(path).map_err(|e| {
            Error::usage(format!("cannot read the list `{}`: {e}", path.display()))
                .with_hint("check the path of the list file")
        })?;
        (bytes, path.display().to_string())
    };
    legacy::parse(&bytes, &name, opts)
}

/// What a build did, for the caller to report.
#[derive(Debug, Default)]
pub struct BuildReport {
    pub warnings: Vec<Warning>,
    /// (name, alignment) of each file whose alignment was missed.
    pub misses: Vec<(Vec<u8>, u32)>,
    pub stats: WriteStats,
    pub size: u64,
}

/// Stats the sources, plans in order and writes the archive atomically.
pub fn build_entries(
    entries: &mut [Entry],
    compat: bool,
    opts: &PlanOptions,
    output: &Path,
    sync: bool,
) -> Result<BuildReport> {
    resolve::stat_sources(entries, compat)?;
    write_entries(entries, opts, output, sync)
}

/// The current time as a cpio mtime (gen_init_cpio's default for entries
/// that are not files).
pub fn now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs().min(u32::MAX as u64) as u32)
        .unwrap_or(0)
}

/// A manifest loaded and lowered, with the plan options and the segments
/// it asks for.
pub struct ManifestBuild {
    pub lowered: crate::manifest::Lowered,
    pub opts: PlanOptions,
    pub segments: crate::segment::Segments,
}

/// What the command line may override in a manifest build.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub mtime: Option<u32>,
    pub align: Option<u32>,
    pub crc: bool,
    pub mode: Option<plan::AlignMode>,
}

/// Loads and lowers a manifest and decides the plan options; `output` is
/// where the archive will go (for `align = "auto"`).
pub fn prepare_manifest(
    path: &Path,
    load: &crate::manifest::LoadOptions,
    overrides: &Overrides,
    output: Option<&Path>,
) -> Result<ManifestBuild> {
    use crate::manifest::{DefaultAlign, MtimeChoice};
    let loaded = crate::manifest::load(path, load)?;
    let mut lowered = crate::manifest::lower(&loaded)?;
    resolve::stat_sources(&mut lowered.entries, false)?;
    let segments = crate::segment::prepare(&loaded, &lowered.entries, &mut lowered.warnings)?;
    let align = match (overrides.align, lowered.align) {
        (Some(a), _) => a,
        (None, DefaultAlign::None) => 0,
        (None, DefaultAlign::Bytes(n)) => n,
        (None, DefaultAlign::Auto) => output.map_or(Ok(0), block_size_for)?,
    };
    let fixed = overrides.mtime.or(match lowered.mtime {
        MtimeChoice::Fixed(t) => Some(t),
        MtimeChoice::Source => None,
    });
    Ok(ManifestBuild {
        opts: PlanOptions {
            crc: overrides.crc,
            align,
            mtime: plan::MtimePolicy { fixed, now: 0 },
            mode: overrides.mode.unwrap_or(lowered.align_mode),
        },
        lowered,
        segments,
    })
}

/// Writes a manifest's image: its segments, atomically.
pub fn write_manifest(build: &ManifestBuild, output: &Path, sync: bool) -> Result<BuildReport> {
    crate::segment::write(
        &build.segments,
        &build.lowered.entries,
        &build.opts,
        output,
        sync,
    )
}

/// The block size of the filesystem an output file will live on.
pub fn block_size_for(output: &Path) -> Result<u32> {
    if output == Path::new("-") {
        return Ok(0);
    }
    let dir = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let st = rustix::fs::statfs(dir).map_err(|e| Error::io(dir, e.into()))?;
    let bsize = st.f_bsize as u64;
    Ok(
        if bsize.is_power_of_two() && (4..=1 << 20).contains(&bsize) {
            bsize as u32
        } else {
            4096
        },
    )
}

/// Plans and writes already-resolved entries.
pub fn write_entries(
    entries: &[Entry],
    opts: &PlanOptions,
    output: &Path,
    sync: bool,
) -> Result<BuildReport> {
    let layout = plan::plan(entries, opts);
    let out = Output::create(output)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let stats = writer::write(&layout, out.file(), &out.name(), threads)?;
    out.commit(sync)?;
    let misses = layout
        .records
        .iter()
        .filter_map(|r| match r.alignment {
            Alignment::Missed(a) => Some((r.name.to_vec(), a)),
            _ => None,
        })
        .collect();
    Ok(BuildReport {
        warnings: layout.warnings,
        misses,
        stats,
        size: layout.size,
    })
}
