//! `composer check-boot`: whether an image brings up the root's block stack.

use std::path::{Path, PathBuf};

use composer::boot_check::{self, Inputs, Names};
use composer::error::{Error, Result};
use composer::image::{cat, Want};
use composer::resolve::kmod::ModuleTree;
use composer::resolve::root::Root;

use super::ui;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  composer check-boot /boot/initrd.img-$(uname -r)\n  \
                        composer check-boot --kernel-cmdline \"root=/dev/vg/root rd.lvm.vg=vg\" initrd.img"
)]
pub struct Args {
    /// The image (`-` for standard input).
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
    /// The root the image is for, mounted: its crypttab, kernel command
    /// line and module tree are read there, and the block stack is the one
    /// under the filesystem holding DIR (and DIR/usr when that is a mount).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// The kernel command line the image boots with (default: the root's
    /// /etc/kernel/cmdline, else, for the running root, /proc/cmdline
    /// without its rdinit=, which belongs to the running boot's initrd).
    #[arg(long, value_name = "TEXT")]
    pub kernel_cmdline: Option<String>,
    /// The image's kernel version (default: the one module tree in the image).
    #[arg(long, value_name = "VERSION")]
    pub kver: Option<String>,
    /// The kernel's full module tree, when it is not the root's
    /// lib/modules/VERSION (the reference for what each layer needs).
    #[arg(long, value_name = "DIR")]
    pub kmoddir: Option<PathBuf>,
    /// Count on no cipher instructions of this CPU (AES-NI): check the LUKS
    /// layers as for a machine whose kernel needs the cipher's templates
    /// (`xts`, `cbc`, ...), as an image moved to other hardware may.
    #[arg(long)]
    pub any_cpu: bool,
    /// Print JSON: `{image, kver, bootable, checks: [{layer, depth, found,
    /// missing, fix}], notes}`.
    #[arg(long)]
    pub json: bool,
}

/// A small text file of the image (at most 1 MiB), if it has one.
fn image_text(image: &composer::image::Image, path: &str) -> Option<String> {
    let want = cat::find(image, path).ok()??;
    let mut out = Vec::new();
    image
        .for_each_data(|seg, i, data| {
            if (seg, i) == want {
                std::io::Read::read_to_end(&mut std::io::Read::take(data, 1 << 20), &mut out)
                    .map_err(|e| Error::io(path, e))?;
            }
            Ok(())
        })
        .ok()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// The check of `image` for kernel `kver` against the running stack, with
/// the root's module tree (or `kmoddir`) and command line (or `cmdline`);
/// `any_cpu` leaves this CPU's accelerated ciphers out of it.
pub(super) fn report_for(
    image: &composer::image::Image,
    root_dir: &Path,
    kver: &str,
    kmoddir: Option<&Path>,
    cmdline_text: Option<&str>,
    any_cpu: bool,
) -> Result<boot_check::Report> {
    let root = Root::new(root_dir);
    let scans = composer::cache::cache_dir().join("kmod-scan");
    let tree = match kmoddir {
        Some(dir) => ModuleTree::open_in(&root, kver, dir, Some(&scans)),
        None => ModuleTree::open_with(&root, kver, Some(&scans)),
    }
    .map_err(|e| {
        Error::usage(format!("kernel {kver}: {e}"))
            .with_hint("check-boot needs the kernel's full module tree: --kmoddir DIR")
    })?;
    let stack = boot_check::running_stack(root_dir)?;
    let cmdline = cmdline_text
        .map(str::to_string)
        .unwrap_or_else(|| composer::cmdline::of_root(root_dir).unwrap_or_default());
    let crypttab = image_text(image, "etc/crypttab");
    Ok(boot_check::check(&Inputs {
        image,
        stack: &stack,
        tree: &tree,
        cmdline: &cmdline,
        crypttab: crypttab.as_deref(),
        root: root_dir,
        // The running kernel's algorithms say what this kernel, on this
        // CPU, serves: for its own root, or an image of the same kernel.
        crypto: &if !any_cpu
            && (root_dir == Path::new("/") || running_release().as_deref() == Some(kver))
        {
            boot_check::running_crypto()
        } else {
            Vec::new()
        },
    }))
}

/// The stack judged is this machine's: an image of another architecture
/// (an aarch64 image on an x86_64 host) cannot boot it, and no verdict on it
/// would mean anything. Refused, naming both.
fn same_machine(image: &composer::image::Image) -> Result<()> {
    let census = composer::image::arch::census(image)?;
    let host = composer::arch::Arch::host();
    match census.main() {
        Some(a) if a != host => Err(Error::usage(format!(
            "{}: the image is for {} and this machine is {}: check-boot judges an image against \
             the stack of the machine it runs on",
            image.name,
            a.name(),
            host.name()
        ))
        .with_hint(format!(
            "run check-boot on the image's own machine ({}), or boot the image under \
             emulation (qemu-system-{})",
            a.name(),
            a.name()
        ))),
        _ => Ok(()),
    }
}

/// The running kernel's release (`uname -r`).
fn running_release() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some(text.trim().to_string())
}

pub fn exec(a: Args) -> Result<()> {
    let image = ui::open_image(&a.image, Want::default())?;
    if let Some(e) = image.fault_error() {
        return Err(e);
    }
    same_machine(&image)?;
    let kver = match &a.kver {
        Some(k) => k.clone(),
        None => {
            let kernels = Names::of(&image).kernels();
            match kernels.as_slice() {
                [one] => one.clone(),
                [] => {
                    return Err(Error::usage(format!(
                        "{}: the image has no kernel modules",
                        image.name
                    ))
                    .with_hint("name the kernel it is for with --kver VERSION"))
                }
                many => {
                    return Err(Error::usage(format!(
                        "{}: the image has modules of several kernels ({})",
                        image.name,
                        many.join(", ")
                    ))
                    .with_hint("name the one it boots with --kver VERSION"))
                }
            }
        }
    };
    let report = report_for(
        &image,
        &a.root,
        &kver,
        a.kmoddir.as_deref(),
        a.kernel_cmdline.as_deref(),
        a.any_cpu,
    )?;
    let text = if a.json {
        let mut doc = serde_json::to_value(&report).unwrap_or_default();
        doc["bootable"] = serde_json::Value::Bool(report.bootable());
        ui::json_text(&doc)
    } else {
        report.render()
    };
    ui::print(&text)?;
    if report.bootable() {
        return Ok(());
    }
    Err(Error::found(format!(
        "{}: cannot bring up {}",
        image.name,
        report.failing()
    )))
}
