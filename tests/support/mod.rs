#![allow(dead_code)]
//! Shared helpers for the integration tests (`mod support;` in each test file).
//!
//! Tests that need an outside tool, a downloaded kernel or root privileges use the
//! `require_*` helpers: when the thing is missing they print
//! `SKIP: <what> (Debian package <pkg>)` to stderr and the test returns early. With
//! `COMPOSER_STRICT_TESTS=1` (what CI sets) a missing prerequisite is a failure instead,
//! so a green CI run really exercised everything.
//!
//! Built or downloaded assets (the kernel's gen_init_cpio, Debian's kernel package) are
//! cached under `<cargo target dir>/test-assets` (override: `COMPOSER_TEST_ASSETS`).
//! Concurrent tests are safe: each asset is built under an exclusive file lock into a
//! temporary name and renamed into place.

pub mod release;

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read};
use std::ops::Deref;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// Skip / strict semantics
// ---------------------------------------------------------------------------------------

/// True when `COMPOSER_STRICT_TESTS=1`: missing prerequisites fail instead of skipping.
pub fn strict() -> bool {
    std::env::var("COMPOSER_STRICT_TESTS").is_ok_and(|v| v == "1")
}

/// Reports a missing prerequisite: prints `SKIP: <msg>` to stderr, or panics with that
/// message in strict mode.
pub fn skip(msg: &str) {
    let line = format!("SKIP: {msg}");
    if strict() {
        panic!("{line} (COMPOSER_STRICT_TESTS=1 turns skips into failures)");
    }
    eprintln!("{line}");
}

/// Searches PATH (then the sbin directories, which a non-login root shell may lack) for
/// an executable file called `name`.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = [
        "/usr/local/sbin",
        "/usr/sbin",
        "/sbin",
        "/usr/local/bin",
        "/usr/bin",
        "/bin",
    ];
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds `name` on PATH; when missing, skips (prints
/// `SKIP: <name> not found (Debian package <package>)`) or panics in strict mode.
pub fn require_tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = find_tool(name);
    if found.is_none() {
        skip(&format!("{name} not found (Debian package {package})"));
    }
    found
}

/// Whether the default (generic) image can be built from this host: it takes the
/// host's systemd as its init when there is one, and udevadm with it. Otherwise skips
/// (panics in strict mode).
pub fn generic_image_host() -> bool {
    !Path::new("/usr/lib/systemd/systemd").exists() || require_tool("udevadm", "udev").is_some()
}

/// True when running as root (uid 0); otherwise skips, or panics in strict mode.
pub fn require_root() -> bool {
    if is_root() {
        return true;
    }
    skip("this test needs root (uid 0)");
    false
}

/// The effective uid is 0, read from /proc (std has no getuid).
pub fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

// ---------------------------------------------------------------------------------------
// Running things
// ---------------------------------------------------------------------------------------

/// Writes the partition table `script` (sfdisk's input) onto the disk image `disk`,
/// leaving the kernel out of it (no re-read).
pub fn sfdisk(disk: &Path, script: &str) {
    let mut child = Command::new(find_tool("sfdisk").expect("sfdisk (fdisk) not found"))
        .args(["-q", "--no-reread", "--no-tell-kernel"])
        .arg(disk)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), script.as_bytes()).unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "sfdisk {script}");
}

/// `s` as a TOML string (quoted and escaped as TOML needs), for manifests the
/// tests write.
pub fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The `composer` binary under test: the one built for this test run, or
/// `COMPOSER_TEST_BIN` (to run the tests against another build, e.g. to see
/// which of them an older commit fails).
pub fn composer_bin() -> PathBuf {
    std::env::var_os("COMPOSER_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_composer")))
}

/// A `Command` for the `composer` binary under test.
pub fn composer() -> Command {
    Command::new(composer_bin())
}

/// Runs `cmd` to completion, capturing stdout and stderr (stdin is null).
pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Runs `cmd` and panics (showing its stderr) unless it exits 0. Returns its output.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    if !out.status.success() {
        panic!(
            "{cmd:?} failed with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Like `run_ok`, but returns an error message instead of panicking.
/// The type of the filesystem `path` is on, as `stat -f -c %T` names it
/// ("ext2/ext3", "tmpfs", "xfs", "btrfs", ...).
pub fn fs_type(path: &Path) -> String {
    let out = run_ok(Command::new("stat").args(["-f", "-c", "%T"]).arg(path));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn try_run(cmd: &mut Command) -> Result<Output, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{cmd:?} failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

// ---------------------------------------------------------------------------------------
// Scratch directories
// ---------------------------------------------------------------------------------------

static SCRATCH_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Creates a fresh, empty directory unique to this call (pid + name + counter) under the
/// system temp dir, and returns its path. Nothing removes it: prefer [`Scratch`].
pub fn scratch(name: &str) -> PathBuf {
    let n = SCRATCH_COUNTER.fetch_add(1, Ordering::Relaxed);
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = std::env::temp_dir()
        .join("composer-tests")
        .join(format!("{safe}-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// A scratch directory that is removed when dropped (kept, with a note on stderr, when
/// the test is panicking or `COMPOSER_KEEP_SCRATCH=1`, to help debugging).
/// Derefs to `Path`: `dir.join("x")`, `&*dir`, `dir.path()`.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        Scratch(scratch(name))
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking()
            || std::env::var("COMPOSER_KEEP_SCRATCH").is_ok_and(|v| v == "1")
        {
            eprintln!("note: scratch dir kept: {}", self.0.display());
            return;
        }
        let _ = fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------------------
// Asset cache
// ---------------------------------------------------------------------------------------

/// The cache directory for downloaded or built test assets:
/// `$COMPOSER_TEST_ASSETS`, else `$CARGO_TARGET_DIR/test-assets`, else
/// `<target>/test-assets` derived from the composer binary's location. Created if needed.
pub fn assets_dir() -> PathBuf {
    let dir = if let Some(d) = std::env::var_os("COMPOSER_TEST_ASSETS") {
        PathBuf::from(d)
    } else if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        PathBuf::from(d).join("test-assets")
    } else {
        // <target>/debug/composer or <target>/<triple>/debug/composer
        let exe = Path::new(env!("CARGO_BIN_EXE_composer"));
        let profile_dir = exe.parent().expect("binary has a parent dir");
        let mut target = profile_dir.parent().expect("profile dir has a parent");
        if !target.join("CACHEDIR.TAG").exists() {
            if let Some(up) = target.parent().filter(|p| p.join("CACHEDIR.TAG").exists()) {
                target = up;
            }
        }
        target.join("test-assets")
    };
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// An exclusive lock on `<assets>/<name>.lock`, released on drop.
pub struct AssetLock(File);

// File::lock is stable since 1.89, newer than the crate's MSRV; the tests need not build
// on the MSRV toolchain.
#[allow(clippy::incompatible_msrv)]
impl AssetLock {
    pub fn acquire(name: &str) -> AssetLock {
        let path = assets_dir().join(format!("{name}.lock"));
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
        f.lock()
            .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
        AssetLock(f)
    }

    /// One of `n` locks `<name>-0` ... `<name>-(n-1)`: the first free one, else (after
    /// polling for a while) the first, waited for.
    pub fn one_of(name: &str, n: usize) -> AssetLock {
        let open = |i: usize| {
            let path = assets_dir().join(format!("{name}-{i}.lock"));
            File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()))
        };
        loop {
            for i in 0..n {
                let f = open(i);
                if f.try_lock().is_ok() {
                    return AssetLock(f);
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[allow(clippy::incompatible_msrv)]
impl Drop for AssetLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Returns `<assets>/<name>`, building it first if absent. `build` gets a temporary path
/// (not existing yet) next to the final one and must create the asset there (a file or a
/// directory); it is then renamed into place. Runs under an exclusive lock, so concurrent
/// tests build it once. A failed build is reported with [`skip`] and gives `None`.
pub fn cached_asset(
    name: &str,
    build: impl FnOnce(&Path) -> Result<(), String>,
) -> Option<PathBuf> {
    let dir = assets_dir();
    let dest = dir.join(name);
    if dest.exists() {
        return Some(dest);
    }
    let _lock = AssetLock::acquire(name);
    if dest.exists() {
        return Some(dest);
    }
    // Leftovers of builds that were killed midway (we hold the lock: nobody else is
    // building this asset now).
    let stale = format!(".{name}.tmp-");
    if let Ok(rd) = fs::read_dir(&dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&stale) {
                remove_any(&e.path());
            }
        }
    }
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let started = Instant::now();
    match build(&tmp) {
        Ok(()) => {
            fs::rename(&tmp, &dest).unwrap_or_else(|e| {
                panic!("cannot rename {} to {}: {e}", tmp.display(), dest.display())
            });
            eprintln!(
                "note: built test asset {} in {:.1} s",
                dest.display(),
                started.elapsed().as_secs_f64()
            );
            Some(dest)
        }
        Err(msg) => {
            remove_any(&tmp);
            skip(&msg);
            None
        }
    }
}

fn remove_any(p: &Path) {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            let _ = fs::remove_dir_all(p);
        }
        Ok(_) => {
            let _ = fs::remove_file(p);
        }
        Err(_) => {}
    }
}

// ---------------------------------------------------------------------------------------
// Oracles and guests: the kernel's gen_init_cpio, Debian's kernel, static busybox
// ---------------------------------------------------------------------------------------

/// Debian's kernel source tarball (package linux-source-6.12), newest if several exist.
pub fn linux_source_tarball() -> Option<PathBuf> {
    let preferred = PathBuf::from("/usr/src/linux-source-6.12.tar.xz");
    if preferred.is_file() {
        return Some(preferred);
    }
    let mut found: Vec<PathBuf> = fs::read_dir("/usr/src")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("linux-source-") && n.ends_with(".tar.xz"))
        })
        .collect();
    found.sort();
    found.pop()
}

/// The kernel's own `usr/gen_init_cpio`, compiled with `cc -O2` from Debian's
/// linux-source-6.12 tarball and cached. Used as an oracle: for the options it knows,
/// composer's output must be byte-identical to it. (The 6.12 tool has only `-t`, `-c`
/// and `-h`: no `-o` and no `-a`, and writes the archive to stdout.)
pub fn kernel_gen_init_cpio() -> Option<PathBuf> {
    let Some(tarball) = linux_source_tarball() else {
        skip("/usr/src/linux-source-*.tar.xz not found (Debian package linux-source-6.12)");
        return None;
    };
    let cc = require_tool("cc", "gcc")?;
    let tar = require_tool("tar", "tar")?;
    require_tool("xz", "xz-utils")?;
    let stem = tarball
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".tar.xz"))
        .unwrap_or("linux-source")
        .to_string();
    let src = cached_asset(&format!("{stem}-gen_init_cpio.c"), |tmp| {
        let work = PathBuf::from(format!("{}.d", tmp.display()));
        remove_any(&work);
        fs::create_dir_all(&work).map_err(|e| e.to_string())?;
        let result = try_run(
            Command::new(&tar)
                .arg("-xJf")
                .arg(&tarball)
                .arg("-C")
                .arg(&work)
                .arg("--wildcards")
                .arg("*/usr/gen_init_cpio.c"),
        )
        .and_then(|_| {
            let c = work.join(&stem).join("usr/gen_init_cpio.c");
            fs::rename(&c, tmp).map_err(|e| format!("{}: {e}", c.display()))
        });
        remove_any(&work);
        result
    })?;
    cached_asset(&format!("{stem}-gen_init_cpio"), |tmp| {
        try_run(Command::new(&cc).arg("-O2").arg("-o").arg(tmp).arg(&src)).map(|_| ())
    })
}

/// Debian's kernel, unpacked with `dpkg -x`.
#[derive(Clone, Debug)]
pub struct DebianKernel {
    /// The kernel release, e.g. `6.1.0-57-amd64` (the name of the modules directory).
    pub version: String,
    /// `<root>/boot/vmlinuz-<version>`.
    pub vmlinuz: PathBuf,
    /// The `dpkg -x` directory; contains `lib/modules/<version>` and `boot/`.
    pub root: PathBuf,
    /// The root images for this kernel take their programs from (`--root` of
    /// [`shared_image`]): `/` for the kernel package alone, the release's root for a
    /// release's kernel.
    pub userland: PathBuf,
}

impl DebianKernel {
    /// `<root>/lib/modules/<version>` (`<root>/usr/lib/...` in a root whose `/lib` is
    /// not there: a release's packages unpacked without their scripts).
    pub fn modules_dir(&self) -> PathBuf {
        let lib = self.root.join("lib/modules").join(&self.version);
        if lib.is_dir() {
            return lib;
        }
        self.root.join("usr/lib/modules").join(&self.version)
    }
    /// `<root>/boot/config-<version>`.
    pub fn config(&self) -> PathBuf {
        self.root
            .join("boot")
            .join(format!("config-{}", self.version))
    }
    /// True when the kernel config has `<option>=y`, e.g. `CONFIG_INITRAMFS_PRESERVE_MTIME`.
    pub fn config_enabled(&self, option: &str) -> bool {
        let want = format!("{option}=y");
        fs::read_to_string(self.config()).is_ok_and(|c| c.lines().any(|l| l == want))
    }
}

/// The versioned package that `linux-image-amd64` depends on, from `apt-cache depends`.
pub fn debian_kernel_package() -> Result<String, String> {
    let out = try_run(Command::new("apt-cache").args(["depends", "linux-image-amd64"]))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|p| {
            p.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string()
        })
        .find(|p| p.starts_with("linux-image-"))
        .ok_or_else(|| {
            "apt-cache depends linux-image-amd64 names no linux-image-* package \
             (run apt-get update first)"
                .to_string()
        })
}

/// Debian's current amd64 kernel package (resolved through `apt-cache depends
/// linux-image-amd64`), fetched with `apt-get download` and unpacked with `dpkg -x` into
/// the asset cache (about 400 MB unpacked). Skips (or fails in strict mode) when apt or
/// dpkg is missing or the download fails (it needs `apt-get update` to have run).
pub fn debian_kernel() -> Option<DebianKernel> {
    require_tool("apt-get", "apt")?;
    require_tool("apt-cache", "apt")?;
    let dpkg = require_tool("dpkg", "dpkg")?;
    let package = match debian_kernel_package() {
        Ok(p) => p,
        Err(e) => {
            skip(&format!("Debian kernel: {e}"));
            return None;
        }
    };
    let root = cached_asset(&format!("debian-kernel-{package}"), |tmp| {
        let dl = PathBuf::from(format!("{}.dl", tmp.display()));
        remove_any(&dl);
        fs::create_dir_all(&dl).map_err(|e| e.to_string())?;
        let result = (|| {
            try_run(
                Command::new("apt-get")
                    .args(["download", "-q"])
                    .arg(&package)
                    .current_dir(&dl),
            )
            .map_err(|e| format!("Debian kernel download failed: {e}"))?;
            let deb = fs::read_dir(&dl)
                .map_err(|e| e.to_string())?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| p.extension().is_some_and(|x| x == "deb"))
                .ok_or("apt-get download produced no .deb")?;
            try_run(Command::new(&dpkg).arg("-x").arg(&deb).arg(tmp)).map(|_| ())
        })();
        remove_any(&dl);
        result
    })?;
    let version = fs::read_dir(root.join("lib/modules"))
        .ok()
        .and_then(|mut d| d.find_map(|e| e.ok()?.file_name().into_string().ok()));
    let Some(version) = version else {
        skip(&format!(
            "{}: no lib/modules/<version> inside",
            root.display()
        ));
        return None;
    };
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{version}"));
    if !vmlinuz.is_file() {
        skip(&format!("{} missing", vmlinuz.display()));
        return None;
    }
    Some(DebianKernel {
        version,
        vmlinuz,
        root,
        userland: PathBuf::from("/"),
    })
}

/// The modules kmod's `modprobe --show-depends` inserts for `query` (a name or
/// alias) in the tree `base` made by [`debian_kernel_depmod`], in its order.
pub fn modprobe_inserts(base: &Path, kver: &str, query: &str) -> Vec<String> {
    let out = Command::new("modprobe")
        .arg("-d")
        .arg(base)
        .args(["-S", kver, "--show-depends", query])
        .output()
        .expect("run modprobe");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("insmod "))
        .filter_map(|p| p.split_whitespace().next())
        .map(module_name)
        .collect()
}

/// A module's name from its file's path (`.../dm-mod.ko.xz` is `dm_mod`).
pub fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.split(".ko").next().unwrap_or(file).replace('-', "_")
}

/// Module metadata for `kernel` made by kmod's `depmod` (the package ships none), in a
/// separate cached tree so the unpacked package stays pristine. Returns the base
/// directory `B` (for `depmod -b B`, `modprobe -d B -S <version>`):
/// `B/lib/modules/<version>/` holds `modules.dep`, `modules.softdep`, ... and a `kernel`
/// symlink to the package's module files. (Debian 12's kmod has no `depmod -o`.)
pub fn debian_kernel_depmod(kernel: &DebianKernel) -> Option<PathBuf> {
    depmod_tree(kernel, &format!("depmod-{}", kernel.version))
}

/// [`debian_kernel_depmod`] into the asset `name` (name it after the tree's own asset:
/// the result links to the tree's files).
pub fn depmod_tree(kernel: &DebianKernel, name: &str) -> Option<PathBuf> {
    let depmod = require_tool("depmod", "kmod")?;
    cached_asset(name, |tmp| {
        let src = kernel.modules_dir();
        let dst = tmp.join("lib/modules").join(&kernel.version);
        fs::create_dir_all(&dst).map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink(src.join("kernel"), dst.join("kernel"))
            .map_err(|e| e.to_string())?;
        for e in fs::read_dir(&src).map_err(|e| e.to_string())?.flatten() {
            if e.file_name().to_string_lossy().starts_with("modules.") {
                fs::copy(e.path(), dst.join(e.file_name())).map_err(|e| e.to_string())?;
            }
        }
        try_run(
            Command::new(&depmod)
                .arg("-b")
                .arg(tmp)
                .arg(&kernel.version),
        )
        .map(|_| ())
    })
}

/// A statically linked busybox (Debian's busybox-static installs /bin/busybox). The
/// dynamically linked one from the `busybox` package is refused: it cannot run in an
/// initramfs without its libc.
pub fn busybox_static() -> Option<PathBuf> {
    let candidates = [find_tool("busybox"), Some(PathBuf::from("/bin/busybox"))];
    for p in candidates.into_iter().flatten() {
        if is_executable(&p) && fs::read(&p).is_ok_and(|b| elf_is_static(&b)) {
            return Some(p);
        }
    }
    skip("static busybox not found (Debian package busybox-static)");
    None
}

/// True for a 64-bit little-endian ELF without a PT_INTERP program header.
pub fn elf_is_static(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).all(|i| {
        let o = phoff + i * phentsize;
        elf.get(o..o + 4)
            .is_some_and(|t| u32::from_le_bytes(t.try_into().unwrap()) != PT_INTERP)
    })
}

// ---------------------------------------------------------------------------------------
// qemu
// ---------------------------------------------------------------------------------------

/// `qemu-system-x86_64`, or a skip (Debian package qemu-system-x86).
pub fn require_qemu() -> Option<PathBuf> {
    require_tool("qemu-system-x86_64", "qemu-system-x86")
}

/// Everything needed to boot an initramfs under qemu: qemu, Debian's kernel and a static
/// busybox. `None` (after a skip message) if any is missing.
pub fn require_boot_env() -> Option<(PathBuf, DebianKernel, PathBuf)> {
    let qemu = require_qemu()?;
    let busybox = busybox_static()?;
    let kernel = debian_kernel()?;
    Some((qemu, kernel, busybox))
}

/// [`require_boot_env`] on the boot matrix's platform: Debian 13's kernel and root
/// ([`release::platform_kernel`]), whose generic images take the root's programs.
pub fn require_platform_env() -> Option<(PathBuf, DebianKernel, PathBuf)> {
    let qemu = require_qemu()?;
    let busybox = busybox_static()?;
    let kernel = release::platform_kernel()?;
    Some((qemu, kernel, busybox))
}

/// Whether a console line shows `want` as a whole marker: followed by the end of the
/// line, a space, or a kernel message the serial console wrote into the same line
/// (`pid=1[   12.91] systemd-journald...`), never by more of a word (`pid=12`).
pub fn console_shows(console: &str, want: &str) -> bool {
    console.lines().any(|l| {
        l.match_indices(want).any(|(i, _)| {
            l[i + want.len()..]
                .chars()
                .next()
                .is_none_or(|c| c.is_whitespace() || c == '[')
        })
    })
}

#[test]
fn console_markers_survive_kernel_messages_written_into_their_line() {
    let want = "COMPOSER-ROOT-OK t fs=ext4 pid=1";
    assert!(console_shows(
        "x\nCOMPOSER-ROOT-OK t fs=ext4 pid=1\r\n",
        want
    ));
    assert!(console_shows(
        "COMPOSER-ROOT-OK t fs=ext4 pid=1[   12.9] systemd-journald[104]: Failed",
        want
    ));
    assert!(!console_shows("COMPOSER-ROOT-OK t fs=ext4 pid=12\n", want));
    assert!(!console_shows("COMPOSER-ROOT-OK t fs=ext4 pid=\n", want));
}

/// How a boot that did not reach its root ended, as its console shows it: composer's
/// shell init naming what it looked for and then giving up (`panic=`) or starting
/// the emergency shell, the systemd init's emergency mode, the kernel finding no init
/// to run, or an unlock prompt (either init's) shown more often than the test
/// answered it (`answered`). None when the console shows
/// none of these (a hang, a crash, qemu not starting): no test may count that as the
/// failure it expects.
pub fn initrd_stop(console: &str, answered: usize) -> Option<&'static str> {
    if console.contains("composer-init: panic=") && console.contains("giving up")
        || console.contains("composer-init: starting an emergency shell")
        || console.contains("composer: emergency mode")
    {
        Some("the initrd gave up")
    } else if console.contains("No working init found")
        || console.contains("Unable to mount root fs")
    {
        Some("no init to run")
    } else if console.matches("Enter passphrase for").count()
        + console.matches("Please enter passphrase").count()
        > answered
    {
        Some("an unanswered unlock prompt")
    } else {
        None
    }
}

/// The layers a `composer check-boot --json` document fails.
pub fn failing_layers(doc: &serde_json::Value) -> Vec<String> {
    doc["checks"]
        .as_array()
        .map(|checks| {
            checks
                .iter()
                .filter(|c| c["missing"].as_array().is_some_and(|m| !m.is_empty()))
                .map(|c| c["layer"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// One row of an agreement table (check-boot's verdict against a boot): the verdict's
/// cell, the boot's cell, and whether a boot that did not reach the root showed where
/// it stopped ([`initrd_stop`]).
pub fn agreement_cells(
    bootable: bool,
    failing: &[String],
    reached: bool,
    stop: Option<&str>,
    secs: f64,
) -> (String, String, bool) {
    let verdict = if bootable {
        "bootable".to_string()
    } else {
        format!("not: {}", failing.join("; "))
    };
    match (reached, stop) {
        (true, _) => (verdict, format!("reached the root ({secs:.0} s)"), true),
        (false, Some(why)) => (verdict, format!("did not: {why} ({secs:.0} s)"), true),
        (false, None) => (
            verdict,
            format!("did not, and the console does not say why ({secs:.0} s)"),
            false,
        ),
    }
}

/// Options for [`qemu_boot_with`].
#[derive(Clone, Debug)]
pub struct BootOptions {
    /// Guest memory in MiB (default 512).
    pub memory_mib: u32,
    /// Appended to the kernel command line
    /// (`console=ttyS0 rdinit=/init panic=-1 quiet`).
    pub extra_append: String,
    /// Extra qemu arguments, e.g. `-drive file=disk.img,if=virtio,format=raw`.
    pub extra_args: Vec<OsString>,
    /// qemu is killed after this long (default 120 s; `COMPOSER_QEMU_TIMEOUT` seconds
    /// overrides it).
    pub timeout: Duration,
    /// When the console shows the first string, the second is typed into it (the
    /// serial line is qemu's standard input).
    pub type_when: Option<(String, String)>,
    /// Prompts and what to type at each, in order, before `type_when`: each waits for
    /// its prompt to show after the previous answer was typed (a passphrase asked three
    /// times is three entries).
    pub answers: Vec<(String, String)>,
    /// How long after its prompt shows each of `answers` is typed (a person slow to
    /// answer; default none beyond the half second every answer waits). Such a
    /// guest is `idle`.
    pub answer_delay: Duration,
    /// The guest spends most of its run waiting for an answer (a person's, typed or
    /// sent over SSH late): it takes a slot of a pool of its own, so that two busy
    /// guests still run beside it.
    pub idle: bool,
    /// qemu is stopped as soon as the console shows this.
    pub stop_when: Option<String>,
    /// Boot from UEFI firmware instead of `-kernel`: the image given is then an
    /// ESP disk image the firmware starts `\EFI\BOOT\BOOTX64.EFI` from.
    pub uefi: Option<Uefi>,
    /// qemu's `-cpu` (default `max`, which has AES-NI; `max,-aes` has not).
    pub cpu: String,
    /// The network namespace qemu runs in (for a tap device made there).
    pub netns: Option<String>,
    /// Boot from the network card's firmware (`-boot n`) instead of `-kernel`: the
    /// kernel, image and command line come from the network (the caller's DHCP and
    /// TFTP servers), and the kernel and image given are not used.
    pub netboot: bool,
    /// The machine emulated (default a PC).
    pub guest: Guest,
    /// When the console shows the first string, the second is sent to qemu's monitor
    /// (`eject -f cd0`: a medium taken out while the guest runs), in order.
    pub monitor: Vec<(String, String)>,
}

/// The machine a guest is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Guest {
    /// qemu-system-x86_64's PC (q35 with UEFI), console ttyS0.
    #[default]
    Pc,
    /// qemu-system-aarch64's `-M virt`, console ttyAMA0; UEFI is AAVMF.
    Arm64Virt,
}

impl Guest {
    /// The qemu binary and the Debian package it is in.
    pub fn qemu(self) -> (&'static str, &'static str) {
        match self {
            Guest::Pc => ("qemu-system-x86_64", "qemu-system-x86"),
            Guest::Arm64Virt => ("qemu-system-aarch64", "qemu-system-arm"),
        }
    }
}

/// OVMF for a UEFI boot (Debian's ovmf package).
#[derive(Clone, Debug)]
pub struct Uefi {
    /// The firmware code (read only).
    pub code: PathBuf,
    /// A copy of a variable store template, written by the boot.
    pub vars: PathBuf,
    /// Secure Boot: SMM and a secure flash, as OVMF's secboot builds need.
    pub secure: bool,
}

impl Default for BootOptions {
    fn default() -> Self {
        BootOptions {
            memory_mib: 512,
            extra_append: String::new(),
            extra_args: Vec::new(),
            timeout: Duration::from_secs(120),
            type_when: None,
            answers: Vec::new(),
            answer_delay: Duration::ZERO,
            idle: false,
            stop_when: None,
            uefi: None,
            cpu: "max".into(),
            netns: None,
            netboot: false,
            guest: Guest::Pc,
            monitor: Vec::new(),
        }
    }
}

/// What a boot produced.
#[derive(Debug)]
pub struct BootResult {
    /// Everything written to the serial console (qemu's stdout; `\r\n` turned into `\n`),
    /// followed by qemu's stderr if it wrote any.
    pub console: String,
    /// qemu was killed because the timeout expired.
    pub timed_out: bool,
    /// How long qemu ran.
    pub elapsed: Duration,
}

impl BootResult {
    /// Ok when the console has `line` as a whole line, no `fail` marker, and no
    /// sign that the kernel failed to unpack the initramfs; else what is missing.
    pub fn reported(&self, line: &str, fail: &str) -> Result<(), String> {
        let c = &self.console;
        if c.lines().any(|l| l.trim() == line)
            && !c.contains(fail)
            && !c.contains("Initramfs unpacking failed")
        {
            return Ok(());
        }
        let timed_out = if self.timed_out {
            " (qemu timed out)"
        } else {
            ""
        };
        Err(format!("the guest did not print `{line}`{timed_out}"))
    }
}

/// Boots `initrd` with a `timeout` and prints the console (shown with --nocapture or
/// when the test fails: the harness captures it), labelled `what`.
pub fn qemu_boot_logged(
    what: &str,
    kernel: &DebianKernel,
    initrd: &Path,
    timeout: Duration,
) -> BootResult {
    let opts = BootOptions {
        timeout,
        ..Default::default()
    };
    let result = qemu_boot_with(kernel, initrd, &opts);
    eprintln!(
        "{what}: qemu ran {:.1} s\n{}",
        result.elapsed.as_secs_f64(),
        result.console
    );
    result
}

/// Boots `image` once per case (a name and its options), all at once (two guests run
/// at a time: the qemu slots), printing each console; the results, in order.
pub fn qemu_boot_all(
    kernel: &DebianKernel,
    image: &Path,
    cases: Vec<(String, BootOptions)>,
) -> Vec<(String, BootResult)> {
    std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .into_iter()
            .map(|(what, opts)| {
                s.spawn(move || {
                    let r = qemu_boot_with(kernel, image, &opts);
                    eprintln!(
                        "--- {what} ({:.1} s) ---\n{}",
                        r.elapsed.as_secs_f64(),
                        r.console
                    );
                    (what, r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Boots `kernel` with `initrd` under qemu (TCG), returns the console text. The guest's
/// /init should end with `poweroff -f` (a kernel panic also ends qemu: `panic=-1` with
/// `-no-reboot`). qemu is killed after `timeout`.
pub fn qemu_boot(kernel: &DebianKernel, initrd: &Path, timeout: Duration) -> String {
    let opts = BootOptions {
        timeout,
        ..BootOptions::default()
    };
    qemu_boot_with(kernel, initrd, &opts).console
}

/// [`qemu_boot`] with more control. Panics if qemu cannot be started.
pub fn qemu_boot_with(kernel: &DebianKernel, initrd: &Path, opts: &BootOptions) -> BootResult {
    let qemu = find_tool(opts.guest.qemu().0)
        .unwrap_or_else(|| panic!("{} not found", opts.guest.qemu().0));
    // At most two busy guests at once: TCG runs each on one core, and more slow each
    // other past their timeouts. Guests that mostly wait for an answer have two slots
    // of their own.
    let idle = opts.idle || !opts.answer_delay.is_zero();
    let _slot = AssetLock::one_of(if idle { "qemu-boot-idle" } else { "qemu-boot" }, 2);
    let timeout = std::env::var("COMPOSER_QEMU_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(opts.timeout);
    let console = match opts.guest {
        Guest::Pc => "ttyS0",
        Guest::Arm64Virt => "ttyAMA0",
    };
    let mut append = format!("console={console} rdinit=/init panic=-1 quiet");
    if !opts.extra_append.is_empty() {
        append.push(' ');
        append.push_str(&opts.extra_append);
    }
    let mut cmd = match &opts.netns {
        None => Command::new(qemu),
        Some(ns) => {
            let mut c = Command::new(find_tool("ip").expect("ip (iproute2) not found"));
            c.args(["netns", "exec", ns]).arg(qemu);
            c
        }
    };
    cmd.args(["-accel", "tcg", "-cpu", &opts.cpu, "-smp", "1", "-m"])
        .arg(opts.memory_mib.to_string());
    if opts.guest == Guest::Arm64Virt {
        cmd.args(["-machine", "virt"]);
    }
    match &opts.uefi {
        None if opts.netboot => {
            cmd.args(["-boot", "n"]);
        }
        None => {
            cmd.arg("-kernel")
                .arg(&kernel.vmlinuz)
                .arg("-initrd")
                .arg(initrd)
                .arg("-append")
                .arg(&append);
        }
        Some(u) => {
            if opts.guest == Guest::Pc {
                cmd.args(["-machine", if u.secure { "q35,smm=on" } else { "q35" }]);
            }
            if u.secure {
                cmd.args(["-global", "driver=cfi.pflash01,property=secure,value=on"]);
            }
            cmd.arg("-drive")
                .arg(format!(
                    "if=pflash,format=raw,readonly=on,file={}",
                    u.code.display()
                ))
                .arg("-drive")
                .arg(format!("if=pflash,format=raw,file={}", u.vars.display()))
                .arg("-drive")
                .arg(format!("file={},format=raw,if=virtio", initrd.display()));
        }
    }
    // The monitor, on a socket of its own when the test sends it commands.
    let monitor_dir = (!opts.monitor.is_empty()).then(|| Scratch::new("qemu-monitor"));
    let monitor_sock = monitor_dir.as_ref().map(|d| d.path().join("monitor.sock"));
    let monitor_arg = match &monitor_sock {
        Some(p) => format!("unix:{},server=on,wait=off", p.display()),
        None => "none".into(),
    };
    cmd.args([
        "-nographic",
        "-no-reboot",
        "-nodefaults",
        "-serial",
        "stdio",
        "-monitor",
    ])
    .arg(&monitor_arg)
    .args(&opts.extra_args)
    .stdin(if opts.type_when.is_some() || !opts.answers.is_empty() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));

    let collect = |mut r: Box<dyn Read + Send>| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buf);
        let handle = std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match r.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => sink.lock().unwrap().extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        });
        (buf, handle)
    };
    let (out_buf, out_thread) = collect(Box::new(child.stdout.take().unwrap()));
    let (err_buf, err_thread) = collect(Box::new(child.stderr.take().unwrap()));

    let mut timed_out = false;
    let mut stdin = child.stdin.take();
    // What is still to be typed, and where on the console its prompt may start.
    let mut answers = opts.answers.iter().chain(&opts.type_when);
    let mut next = answers.next();
    let mut from = 0;
    // When the prompt of the next answer showed (its delay runs from then).
    let mut prompted: Option<Instant> = None;
    let mut typed = 0;
    let mut monitor = opts.monitor.iter().peekable();
    loop {
        if child.try_wait().expect("waiting for qemu").is_some() {
            break;
        }
        let seen = String::from_utf8_lossy(&out_buf.lock().unwrap()).into_owned();
        if let (Some((when, what)), Some(sock)) = (monitor.peek(), &monitor_sock) {
            if seen.contains(when.as_str()) {
                let mut m = std::os::unix::net::UnixStream::connect(sock)
                    .unwrap_or_else(|e| panic!("qemu's monitor {}: {e}", sock.display()));
                std::io::Write::write_all(&mut m, format!("{what}\n").as_bytes())
                    .expect("writing to qemu's monitor");
                // The monitor's answer, read a little: the command ran.
                let _ = m.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 4096];
                let _ = Read::read(&mut m, &mut buf);
                std::thread::sleep(Duration::from_millis(300));
                monitor.next();
            }
        }
        // The marker of `type_when` ends the prompts: answers not typed yet are left
        // out (a program may ask fewer times than a test has answers for: after wrong
        // passphrases systemd-cryptsetup 257 gives up after two prompts, 252 after
        // three).
        if typed < opts.answers.len() {
            if let Some((mark, _)) = &opts.type_when {
                if seen.get(from..).is_some_and(|s| s.contains(mark.as_str())) {
                    for _ in typed..opts.answers.len() {
                        next = answers.next();
                    }
                    typed = opts.answers.len();
                    prompted = None;
                }
            }
        }
        if let Some((when, what)) = next {
            if let Some(at) = seen.get(from..).and_then(|s| s.find(when.as_str())) {
                let delay = if typed < opts.answers.len() {
                    opts.answer_delay
                } else {
                    Duration::ZERO
                };
                let shown = *prompted.get_or_insert_with(Instant::now);
                if shown.elapsed() >= delay {
                    if let Some(input) = stdin.as_mut() {
                        std::thread::sleep(Duration::from_millis(500));
                        let _ = std::io::Write::write_all(input, what.as_bytes());
                        let _ = std::io::Write::flush(input);
                    }
                    from += at + when.len();
                    next = answers.next();
                    prompted = None;
                    typed += 1;
                }
            }
        }
        if opts
            .stop_when
            .as_ref()
            .is_some_and(|s| seen.contains(s.as_str()))
        {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        if started.elapsed() >= timeout {
            timed_out = true;
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let elapsed = started.elapsed();
    let _ = out_thread.join();
    let _ = err_thread.join();

    let mut console = String::from_utf8_lossy(&out_buf.lock().unwrap()).replace("\r\n", "\n");
    let err = String::from_utf8_lossy(&err_buf.lock().unwrap()).into_owned();
    if !err.trim().is_empty() {
        console.push_str("\n--- qemu stderr ---\n");
        console.push_str(&err);
    }
    if timed_out {
        console.push_str(&format!(
            "\n--- qemu killed after {} s ---\n",
            timeout.as_secs()
        ));
    }
    BootResult {
        console,
        timed_out,
        elapsed,
    }
}

// ---------------------------------------------------------------------------------------
// A small, independent newc reader (for checking archives without composer's own code)
// ---------------------------------------------------------------------------------------

/// One newc entry as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewcEntry {
    /// Archive offset of the header.
    pub offset: usize,
    /// `070701` or `070702`.
    pub magic: String,
    pub ino: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub mtime: u32,
    pub filesize: u32,
    pub devmajor: u32,
    pub devminor: u32,
    pub rdevmajor: u32,
    pub rdevminor: u32,
    /// As stored, including the NUL and any padding NULs.
    pub namesize: u32,
    pub check: u32,
    /// The name up to its first NUL.
    pub name: Vec<u8>,
    /// Archive offset of the first data byte.
    pub data_offset: usize,
    pub data: Vec<u8>,
}

impl NewcEntry {
    pub fn name_str(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// Parses one newc archive up to and including its `TRAILER!!!` entry (returned last).
/// Does not accept NULs between entries (unlike the kernel). Errors name the offset.
pub fn parse_newc(data: &[u8]) -> Result<Vec<NewcEntry>, String> {
    let mut entries = Vec::new();
    let mut off = 0usize;
    loop {
        let hdr = data
            .get(off..off + 110)
            .ok_or_else(|| format!("truncated header at offset {off}"))?;
        let magic = std::str::from_utf8(&hdr[..6]).map_err(|_| format!("bad magic at {off}"))?;
        if magic != "070701" && magic != "070702" {
            return Err(format!("bad magic {magic:?} at offset {off}"));
        }
        let mut f = [0u32; 13];
        for (i, v) in f.iter_mut().enumerate() {
            let s = &hdr[6 + i * 8..14 + i * 8];
            if !s.iter().all(u8::is_ascii_hexdigit) {
                return Err(format!("non-hex field {i} at offset {off}"));
            }
            *v = u32::from_str_radix(std::str::from_utf8(s).unwrap(), 16).unwrap();
        }
        let namesize = f[11] as usize;
        let name_field = data
            .get(off + 110..off + 110 + namesize)
            .ok_or_else(|| format!("truncated name at offset {off}"))?;
        let nul = name_field
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| format!("name without NUL at offset {off}"))?;
        let name = name_field[..nul].to_vec();
        let data_offset = (off + 110 + namesize).next_multiple_of(4);
        let size = f[6] as usize;
        let body = data
            .get(data_offset..data_offset + size)
            .ok_or_else(|| format!("truncated data of entry at offset {off}"))?
            .to_vec();
        let is_trailer = name == b"TRAILER!!!";
        entries.push(NewcEntry {
            offset: off,
            magic: magic.to_string(),
            ino: f[0],
            mode: f[1],
            uid: f[2],
            gid: f[3],
            nlink: f[4],
            mtime: f[5],
            filesize: f[6],
            devmajor: f[7],
            devminor: f[8],
            rdevmajor: f[9],
            rdevminor: f[10],
            namesize: f[11],
            check: f[12],
            name,
            data_offset,
            data: body,
        });
        off = (data_offset + size).next_multiple_of(4);
        if is_trailer {
            return Ok(entries);
        }
    }
}

/// qemu's arguments for the raw disk image `path` on virtio-blk with the serial
/// `serial` (also its drive id, so unique in a guest); `opts` go to `-drive` (e.g.
/// `,snapshot=on`). A guest script finds the disk by its serial ([`GUEST_DISK_FN`]),
/// not by its name: virtio disks are named in the order their driver probes them,
/// and an init that loads drivers side by side (as both of composer's do, as udev
/// does) may load virtio_blk while virtio_pci is still adding the disks.
pub fn virtio_disk(path: &Path, serial: &str, opts: &str) -> [OsString; 4] {
    assert!(
        serial.len() <= 20,
        "a virtio-blk serial has at most 20 bytes"
    );
    [
        "-drive".into(),
        format!(
            "file={},format=raw,if=none,id={serial}{opts}",
            path.display()
        )
        .into(),
        "-device".into(),
        format!("virtio-blk-pci,drive={serial},serial={serial}").into(),
    ]
}

/// A guest shell function: `disk SERIAL` prints the /dev path of the virtio disk
/// attached with that serial ([`virtio_disk`]), or fails. `$b` is busybox.
pub const GUEST_DISK_FN: &str = r#"disk() {
    for s in /sys/block/vd*/serial; do
        v=
        read -r v <"$s" 2>/dev/null
        [ "$v" = "$1" ] || continue
        s=${s%/serial}
        echo "/dev/${s##*/}"
        return 0
    done
    echo "no disk with serial $1" >&2
    return 1
}
"#;

/// `composer build --kver VERSION --kmoddir KMODDIR --no-sync`: a build for a kernel
/// tree that is not the machine's own; callers add the manifest, `--root` and `-o`.
pub fn build_for(version: &str, kmoddir: &Path) -> Command {
    let mut cmd = composer();
    cmd.args(["build", "--kver", version, "--kmoddir"])
        .arg(kmoddir)
        .arg("--no-sync");
    cmd
}

/// [`build_for`] `kernel`, the image's programs from its userland (`--root`; sources
/// not starting with `/` stay beside the manifest).
pub fn build_with(kernel: &DebianKernel) -> Command {
    let mut cmd = build_for(&kernel.version, &kernel.modules_dir());
    cmd.arg("--root").arg(&kernel.userland);
    cmd
}

/// The systemd-boot stub of `kernel`'s userland (its release's, for a release's kernel).
pub fn stub_of(kernel: &DebianKernel) -> PathBuf {
    kernel
        .userland
        .join("usr/lib/systemd/boot/efi/linuxx64.efi.stub")
}

/// A program of `kernel`'s userland run on files of `dir`: for the host's userland the
/// program itself; for a release's root, run inside that root (chroot, in a mount
/// namespace of its own where `dir` is bound on the root's /mnt, so the root is never
/// written). Name `dir`'s files to it with [`Userland::path`].
pub struct Userland {
    root: PathBuf,
    dir: PathBuf,
}

impl Userland {
    pub fn new(kernel: &DebianKernel, dir: &Path) -> Userland {
        Userland {
            root: kernel.userland.clone(),
            dir: dir.to_path_buf(),
        }
    }

    fn host(&self) -> bool {
        self.root == Path::new("/")
    }

    /// `program` (an absolute path in the userland), to which callers add arguments.
    pub fn command(&self, program: &str) -> Command {
        if self.host() {
            return Command::new(program);
        }
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$1" "$2/mnt" && shift 2 && exec chroot "$@""#)
            .arg("sh")
            .arg(&self.dir)
            .arg(&self.root)
            .arg(&self.root)
            .arg(program);
        cmd
    }

    /// `p` (a file in `dir`) as the program sees it.
    pub fn path(&self, p: &Path) -> String {
        if self.host() {
            return p.display().to_string();
        }
        let rel = p
            .strip_prefix(&self.dir)
            .unwrap_or_else(|_| panic!("{} is not in {}", p.display(), self.dir.display()));
        Path::new("/mnt").join(rel).display().to_string()
    }
}

/// The bytes of the file at `path` in `image` (`composer cat`).
pub fn image_bytes(image: &Path, path: &str) -> Vec<u8> {
    run_ok(composer().arg("cat").arg(image).arg(path)).stdout
}

/// The text of the file at `path` in `image`.
pub fn image_file(image: &Path, path: &str) -> String {
    String::from_utf8_lossy(&image_bytes(image, path)).into_owned()
}

/// The paths of an image, as `composer inspect` lists them (the last field).
pub fn image_paths(image: &Path) -> Vec<String> {
    let out = run_ok(composer().arg("inspect").arg(image));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect()
}

/// The modules an image's inits load from the start: the names in its
/// `/etc/modules-load.d/composer.conf`, in order.
pub fn modules_load(image: &Path) -> Vec<String> {
    image_file(image, "etc/modules-load.d/composer.conf")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .collect()
}

/// The generic image with `init` for `kernel` (its programs from the kernel's
/// userland), built once per test process and shared by the boot tests that take it
/// as it is (a build of the systemd image takes
/// seconds; the tests that boot it take it many times).
pub fn generic_image(kernel: &DebianKernel, init: &str) -> PathBuf {
    shared_image(
        kernel,
        &format!("generic-{init}"),
        &format!("include = [\"generic\"]\ninit = \"{init}\"\n"),
    )
}

/// The image of `manifest` (named `name` in this run) for `kernel`, its programs from
/// the kernel's userland, built once per test process and shared by the tests that
/// boot it.
pub fn shared_image(kernel: &DebianKernel, name: &str, manifest: &str) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    // One image of a name per kernel (and so per userland).
    let name = &format!("{name}-{}", kernel.version);
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    // Kept for the whole run (other tests may be booting it); a run removes those of
    // runs that are over.
    let dir = DIR.get_or_init(|| {
        let base = std::env::temp_dir().join("composer-tests");
        for e in fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("shared-images-") {
                if !Path::new("/proc").join(pid).exists() {
                    let _ = fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = base.join(format!("shared-images-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        dir
    });
    let m = dir.join(format!("{name}.toml"));
    fs::write(&m, manifest).unwrap();
    let out = dir.join(format!("{name}.img"));
    run_ok(build_with(kernel).arg(&m).arg("-o").arg(&out));
    built.insert(name.to_string(), out.clone());
    out
}
