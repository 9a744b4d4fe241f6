//! `composer build`: an image from a manifest or a gen_init_cpio list.

use std::path::{Path, PathBuf};

use composer::error::{Error, Result};
use composer::image::{Image, Want};
use composer::list::ListOptions;
use composer::manifest::LoadOptions;
use composer::pipeline::{self, ListInput};
use composer::policy::Environment;
use composer::spec::{BootTarget, ImageSpec};

use super::args::{ArchiveArgs, Input, ManifestArgs};
use super::ui;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  composer build examples/minimal.toml -o initrd.img\n  composer build --kver 6.1.0-57-amd64          # the system configuration, to /boot/initrd.img-KVER\n  composer build --list initramfs.list -o initrd.img"
)]
pub struct Args {
    #[command(flatten)]
    pub input: Input,
    #[command(flatten)]
    pub vars: ManifestArgs,
    /// Where to write the archive (`-` for standard output); default the
    /// manifest's `[image] output`, /boot/initrd.img-KVER inside the root.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub archive: ArchiveArgs,
    /// Check the image as `composer check-boot` does before it replaces the
    /// old one: an image that cannot bring up this machine's root is not
    /// installed (exit 1). The default for a hostonly image (`[stack]
    /// from_root`) of the running root.
    #[arg(long, conflicts_with = "no_check")]
    pub check: bool,
    /// Install a hostonly image without checking it.
    #[arg(long)]
    pub no_check: bool,
    /// When the checked image cannot bring up the root, build the generic
    /// image instead and install it if it passes the same check, with a
    /// warning; when neither passes, the old image stays (exit 1). For
    /// package hooks.
    #[arg(long)]
    pub fallback_generic: bool,
    /// The kernel command line the check assumes and a UKI carries (default:
    /// the root's /etc/kernel/cmdline, else /proc/cmdline without the running
    /// boot's initrd= and BOOT_IMAGE=).
    #[arg(long, visible_alias = "cmdline", value_name = "TEXT")]
    pub kernel_cmdline: Option<String>,
    /// Write a unified kernel image: systemd's EFI stub with the kernel, this
    /// image and the command line, one EFI program a firmware or boot loader
    /// starts.
    #[arg(long)]
    pub uki: bool,
    #[command(flatten)]
    pub uki_args: super::uki::UkiArgs,
}

/// The spec of a gen_init_cpio list at `path` (`-`: standard input).
/// `source_date_epoch`: whether SOURCE_DATE_EPOCH applies.
pub fn list_spec(
    path: &Path,
    archive: &ArchiveArgs,
    env: &Environment,
    source_date_epoch: bool,
) -> Result<ImageSpec> {
    let (bytes, name) = ui::read_input(path, "list")?;
    let opts = ListOptions {
        compat: archive.compat,
        ..ListOptions::default()
    };
    let input = ListInput {
        bytes: &bytes,
        name: &name,
    };
    pipeline::list_spec(&input, &opts, &archive.overrides(), env, source_date_epoch)
}

/// The manifest to read and the load options: the one named, or the
/// system configuration of the root.
pub fn manifest_and_options(
    manifest: Option<&Path>,
    vars: &ManifestArgs,
) -> Result<(PathBuf, LoadOptions)> {
    let mut load = vars.load_options();
    if let Some(m) = manifest {
        return Ok((m.to_path_buf(), load));
    }
    let root = vars.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    let config = composer::manifest::system::find(&root);
    load.dropins = config.dropins;
    // No configuration: the profiles named on the command line, else the
    // default one (the generic image).
    let main = match config.main {
        Some(m) => m,
        None if !load.profiles.is_empty() => {
            let first = load.profiles.remove(0);
            composer::manifest::find_profile(&first, &root).map_err(Error::usage)?
        }
        None => composer::manifest::find_profile("default", &root).map_err(Error::usage)?,
    };
    Ok((main, load))
}

/// The check of a finished image before it replaces the old one: Ok when
/// it brings up the root; a finding (exit 1) with the report on standard
/// error when not. When the check itself cannot run, `required` makes that
/// an error; else it is said and the image installed.
fn check_image(
    file: &std::fs::File,
    name: &str,
    target: &BootTarget,
    cmdline: Option<&str>,
    required: bool,
) -> Result<()> {
    let f = file.try_clone().map_err(|e| Error::io(name, e))?;
    let image = Image::from_file(f, name.to_string(), Want::default())?;
    let report = super::check_boot::report_for(
        &image,
        &target.root,
        &target.kver,
        target.kmoddir.as_deref(),
        cmdline,
        false,
    );
    match report {
        Ok(r) if r.bootable() => {
            if ui::verbose() {
                eprint!("{}", r.render());
            }
            Ok(())
        }
        Ok(r) => {
            if !ui::quiet() {
                eprint!("{}", r.render());
            }
            Err(Error::found(format!(
                "{name}: not installed: the image cannot bring up {}; the previous image is kept",
                r.failing()
            )))
        }
        Err(e) if required => Err(e),
        Err(e) => {
            ui::warn(&format!(
                "{name}: installed without the boot check, which could not run: {e}"
            ));
            Ok(())
        }
    }
}

/// Whether `spec` is a systemd image (systemd and an initrd-release): the
/// only kind whose PID 1 the build checks, so that no other image is read
/// back (a manifest of many entries would hold them twice).
fn systemd_image(spec: &ImageSpec) -> bool {
    let has = |path: &[u8]| {
        spec.segments
            .iter()
            .flat_map(|s| &s.entries)
            .any(|e| e.name.as_bytes() == path)
    };
    has(b"usr/lib/systemd/systemd") && has(b"etc/initrd-release")
}

/// Whether the finished image's own PID 1 can start (a systemd image: its
/// executor, units, programs and libraries, judged from the image alone): an
/// error naming what it lacks when not, and the old image is kept.
fn check_pid1(file: &std::fs::File, name: &str) -> Result<()> {
    let f = file.try_clone().map_err(|e| Error::io(name, e))?;
    let image = Image::from_file(f, name.to_string(), Want::default())?;
    match composer::boot_check::pid1(&image)? {
        Some(c) if !c.ok() => {
            let err = Error::usage(format!(
                "{name}: not written: the image's {} cannot start: it lacks {}",
                c.layer,
                c.missing.join("; ")
            ));
            Err(match c.fix {
                Some(f) => err.with_hint(f),
                None => err,
            })
        }
        _ => Ok(()),
    }
}

pub fn exec(a: Args) -> Result<()> {
    let started = std::time::Instant::now();
    let mut bar = super::progress::Bar::start();
    let env = Environment::current();
    let spec = match &a.input.list {
        Some(list) => {
            let Some(out) = &a.output else {
                return Err(Error::usage("--list needs -o OUT").with_hint("e.g. -o initrd.img"));
            };
            if a.check || a.fallback_generic {
                return Err(
                    Error::usage("--check and --fallback-generic need a manifest build")
                        .with_hint("a list names no root or kernel to check the image against"),
                );
            }
            let mut spec = list_spec(list, &a.archive, &env, true)?;
            spec.output = Some(out.clone());
            spec
        }
        None => {
            let (m, load) = manifest_and_options(a.input.manifest.as_deref(), &a.vars)?;
            pipeline::manifest_spec(&m, &load, &a.archive.overrides(), &env, a.output.as_deref())?
        }
    };
    let out = spec.output.clone().expect("a build has an output");
    // Checked: when asked, or a hostonly image of the running root.
    let target = spec.target.clone();
    let checked = target.as_ref().filter(|t| {
        a.check || a.fallback_generic || (!a.no_check && t.hostonly && t.root == Path::new("/"))
    });
    let cmdline = a.kernel_cmdline.as_deref();
    let result = build_one(&spec, &out, &a, checked.map(|t| (t, cmdline, a.check)));
    let (spec, report) = match result {
        Err(e) if e.is_finding() && a.fallback_generic => {
            bar.stop();
            ui::warn(&e);
            let t = checked.expect("a fallback follows a check");
            let generic =
                composer::manifest::find_profile("generic", &t.root).map_err(Error::usage)?;
            let (m, load) = manifest_and_options(Some(&generic), &a.vars)?;
            let spec =
                pipeline::manifest_spec(&m, &load, &a.archive.overrides(), &env, Some(&out))?;
            match build_one(&spec, &out, &a, Some((t, cmdline, a.check))) {
                Ok(report) => {
                    ui::warn(&format!(
                        "THE CONFIGURED IMAGE CANNOT BOOT THIS MACHINE: {} now holds the generic \
                         image instead; fix the configuration (`composer check-boot` tells what \
                         is missing) and build again",
                        out.display()
                    ));
                    (spec, report)
                }
                Err(e2) if e2.is_finding() => {
                    return Err(Error::found(format!(
                        "neither the configured image nor the generic one can bring up this \
                         machine's root; {} is unchanged ({e2})",
                        out.display()
                    )))
                }
                Err(e2) => return Err(e2),
            }
        }
        Err(e) => {
            bar.stop();
            return Err(e);
        }
        Ok(report) => (spec, report),
    };
    bar.stop();
    let entries: usize = spec.segments.iter().map(|s| s.entries.len()).sum();
    let segments = spec.segments.len();
    ui::build_report(&report);
    ui::build_details(&report);
    // Which init "auto" chose: with -v, and always when the root has a
    // systemd the image could not carry.
    if let Some(why) = &spec.init_choice {
        if ui::verbose() || why.contains("the root has systemd but not") {
            ui::note(why);
        }
    }
    if let Some(t) = &spec.arch {
        arch_notes(t);
    }
    ui::build_summary(&out, &report, entries, segments, started.elapsed());
    Ok(())
}

/// The architecture the image is for when it is not this machine's, and
/// what the documents asked for that it leaves out (always for another
/// architecture's image, else with -v).
fn arch_notes(t: &composer::spec::TargetArch) {
    let host = composer::arch::Arch::host();
    let foreign = t.arch != host;
    if foreign {
        ui::note(&format!(
            "built for {}, the root's architecture (this machine is {}); none of the root's programs was run",
            t.arch.name(),
            host.name()
        ));
    }
    if foreign || ui::verbose() {
        for l in &t.left_out {
            ui::note(&format!("left out for {}: {l}", t.arch.name()));
        }
    }
}

/// Plans and writes `spec` to `out`, checked first when `check` says
/// against what.
fn build_one(
    spec: &ImageSpec,
    out: &Path,
    a: &Args,
    check: Option<(&BootTarget, Option<&str>, bool)>,
) -> Result<composer::write::BuildReport> {
    // Every image of a manifest written to a file: its PID 1 can start (a
    // gen_init_cpio list is written as it says); then, when asked, the boot
    // check against the root.
    let pid1 = spec.target.is_some() && systemd_image(spec);
    let checker = |file: &std::fs::File, name: &str| -> Result<()> {
        if pid1 {
            check_pid1(file, name)?;
        }
        match check {
            Some((t, cmdline, required)) => check_image(file, name, t, cmdline, required),
            None => Ok(()),
        }
    };
    if a.uki || spec.target.as_ref().is_some_and(|t| t.uki.build) {
        let cmdline = a.kernel_cmdline.as_deref();
        let before: composer::write::BeforeCommit = &checker;
        return super::uki::build(
            spec,
            out,
            &a.uki_args,
            cmdline,
            !a.archive.no_sync,
            Some(before),
        );
    }
    let mut output = ui::archive_output(out)?;
    if spec.private {
        output = output.private();
    }
    let to_file = output.free_space().is_some();
    if check.is_some() && !to_file {
        return Err(Error::usage("--check needs the image written to a file")
            .with_hint("give -o a file path, or --no-check"));
    }
    let before: Option<composer::write::BeforeCommit> =
        (to_file && (pid1 || check.is_some())).then_some(&checker);
    pipeline::build_checked(spec, output, !a.archive.no_sync, before)
}
