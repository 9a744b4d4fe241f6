//! The stages wired together: load -> lower -> plan -> write.
//!
//! A manifest is loaded (includes, drop-ins, variables) and lowered into an
//! [`ImageSpec`] under the policy [`crate::policy::decide`] chooses; a list
//! is read into one. Either is planned ([`crate::plan::image`]) and written
//! ([`crate::write::write_image`]).

use std::path::Path;

use crate::error::Result;
use crate::list::{self, ListOptions};
use crate::manifest::{self, LoadOptions};
use crate::policy::{self, Asked, Environment, Overrides};
use crate::spec::ImageSpec;
use crate::write::{self, BuildReport, Output};

/// A gen_init_cpio list's bytes and the name messages call it by.
pub struct ListInput<'a> {
    pub bytes: &'a [u8],
    pub name: &'a str,
}

/// Loads and lowers a manifest; `output` is where the image will go (`-o`;
/// without it, the manifest's default output inside the root), which
/// `align = "auto"` depends on.
pub fn manifest_spec(
    path: &Path,
    load: &LoadOptions,
    cli: &Overrides,
    env: &Environment,
    output: Option<&Path>,
) -> Result<ImageSpec> {
    let mut loaded = manifest::load(path, load)?;
    let output = output
        .map(Path::to_path_buf)
        .unwrap_or_else(|| loaded.output.clone());
    let policy = policy::decide(cli, loaded.asked(), env, Some(&output))?;
    let mut spec = crate::lower::lower(&mut loaded, policy)?;
    spec.output = Some(output);
    Ok(spec)
}

/// Reads a list and stats its sources. `source_date_epoch`: whether
/// SOURCE_DATE_EPOCH applies (not for the gen_init_cpio drop-in).
pub fn list_spec(
    input: &ListInput,
    opts: &ListOptions,
    cli: &Overrides,
    env: &Environment,
    source_date_epoch: bool,
) -> Result<ImageSpec> {
    let policy = policy::decide(cli, Asked::List { source_date_epoch }, env, None)?;
    let mut parsed = list::parse(input.bytes, input.name, opts)?;
    crate::resolve::stat_sources(&mut parsed.entries, opts.compat)?;
    let mut spec = ImageSpec::plain(parsed.entries, policy);
    spec.warnings = parsed.warnings;
    Ok(spec)
}

/// Plans and writes an image; the report carries the spec's warnings
/// first.
pub fn build(spec: &ImageSpec, out: Output, sync: bool) -> Result<BuildReport> {
    build_checked(spec, out, sync, None)
}

/// [`build`], with a look at the finished image before it replaces the
/// old one (`composer build --check`): an error keeps the old one.
pub fn build_checked(
    spec: &ImageSpec,
    out: Output,
    sync: bool,
    check: Option<write::BeforeCommit>,
) -> Result<BuildReport> {
    trim_heap();
    let layout = crate::plan::image(spec);
    let mut report = write::write_image(&layout, out, sync, spec.max_size.clone(), check)?;
    let mut warnings = spec.warnings.clone();
    warnings.append(&mut report.warnings);
    report.warnings = warnings;
    Ok(report)
}

/// Gives the pages that loading a manifest freed back to the system. The
/// allocator keeps freed memory for reuse, but what loading frees is many
/// small pieces between live entries, and the layout and the writer's
/// buffer are large blocks that do not fit there: without this, a build's
/// peak memory is the loader's leftovers plus the layout.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes an integer and only changes the
    // allocator's own bookkeeping; it is safe to call at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
