//! `composer check-boot`: whether an image can bring up the root it is
//! for, layer by layer, before anyone boots it.
//!
//! Input: an image, the root's block stack (the stack model of
//! [`crate::stack`], read from the running machine), the kernel's full
//! module tree for the image's kernel (the reference for what a device or
//! a layer needs: the image's own indexes only know the modules it holds)
//! and the kernel command line. Output: each layer, bottom to top, with
//! what it needs and what of that the image lacks; the init; whether
//! `root=` names the stack's top.
//!
//! What each layer needs is what the hostonly profile would add for it
//! ([`crate::stack::needs`]): modules by name or alias, resolved with
//! modprobe's rules in the reference tree to the files that must be in the
//! image (or built into the kernel), and programs. A disk needs, for each
//! device from it up to the bus whose modalias the reference tree maps to
//! modules, one of those modules. A LUKS device whose image crypttab line
//! names a key file needs that file in the image; one bound to a Tang server
//! (a clevis token) gets a note when the image cannot ask the server.

use crate::cpio::reader::RawEntry;
use crate::image::Image;
use crate::resolve::kmod::{ModuleTree, Step};
use crate::stack::{Kind, LayerId, Stack};
use std::collections::HashMap;
use std::path::Path;

mod image_roots;
mod names;
mod pid1;

pub use names::Names;
mod rules;

/// One line of the verdict: a layer (or the init, or the command line),
/// with what it needs that the image has and what it lacks.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    /// What is checked: `LUKS luks-... (aes-xts-plain64)`, `init`, ...
    pub layer: String,
    /// Nesting under the mount (0: the filesystem, the init, the command line).
    pub depth: usize,
    pub found: Vec<String>,
    pub missing: Vec<String>,
    /// What would add the missing pieces.
    pub fix: Option<String>,
}

impl Check {
    fn new(layer: String, depth: usize) -> Check {
        Check {
            layer,
            depth,
            found: Vec::new(),
            missing: Vec::new(),
            fix: None,
        }
    }

    pub fn ok(&self) -> bool {
        self.missing.is_empty()
    }
}

/// The verdict on one image.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub image: String,
    pub kver: String,
    pub checks: Vec<Check>,
    /// What could not be checked, said but not failing.
    pub notes: Vec<String>,
}

impl Report {
    pub fn bootable(&self) -> bool {
        self.checks.iter().all(Check::ok)
    }

    /// The layers that fail, joined for a message: `LUKS luks-...; LVM volume vg/root`.
    pub fn failing(&self) -> String {
        let layers: Vec<&str> = self
            .checks
            .iter()
            .filter(|c| !c.ok())
            .map(|c| c.layer.as_str())
            .collect();
        layers.join("; ")
    }

    /// The text `check-boot` prints.
    pub fn render(&self) -> String {
        let mut s = format!(
            "{}: {} (kernel {})\n",
            self.image,
            if self.bootable() {
                "bootable"
            } else {
                "NOT bootable"
            },
            self.kver
        );
        for c in &self.checks {
            let indent = "  ".repeat(c.depth + 1);
            if c.ok() {
                s.push_str(&format!("{indent}ok       {}", c.layer));
                if !c.found.is_empty() {
                    s.push_str(&format!(": {}", c.found.join(", ")));
                }
                s.push('\n');
            } else {
                s.push_str(&format!(
                    "{indent}MISSING  {}: {}\n",
                    c.layer,
                    c.missing.join(", ")
                ));
                if let Some(f) = &c.fix {
                    s.push_str(&format!("{indent}         add: {f}\n"));
                }
            }
        }
        for n in &self.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        s
    }
}

/// What a check needs besides the image and the stack.
pub struct Inputs<'a> {
    pub image: &'a Image,
    pub stack: &'a Stack,
    /// The kernel's full module tree (the reference).
    pub tree: &'a ModuleTree,
    /// The kernel command line the image boots with.
    pub cmdline: &'a str,
    /// The image's crypttab, if it has one.
    pub crypttab: Option<&'a str>,
    /// The root the image is for (where the firmware its drivers ask for is).
    pub root: &'a Path,
    /// The running kernel's crypto algorithms and the module serving each
    /// ([`running_crypto`]), for a LUKS root the running kernel has open.
    pub crypto: &'a [Algorithm],
}

/// One algorithm of `/proc/crypto`: its name (`xts(aes)`) and the module
/// that serves it (`aesni_intel`, or `kernel` for a built-in one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Algorithm {
    pub name: String,
    pub module: String,
}

/// The running kernel's algorithms: `/proc/crypto`, read no further than
/// 4 MiB. Empty when it cannot be read.
pub fn running_crypto() -> Vec<Algorithm> {
    crate::stack::read_bounded(Path::new("/proc/crypto"), 4 << 20)
        .map(|b| parse_crypto(&String::from_utf8_lossy(&b)))
        .unwrap_or_default()
}

/// The `name` and `module` of each block of a `/proc/crypto` text.
fn parse_crypto(text: &str) -> Vec<Algorithm> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
        };
        if let (Some(name), Some(module)) = (field("name"), field("module")) {
            out.push(Algorithm { name, module });
        }
    }
    out
}

/// The kernel's name for the data cipher of a dm-crypt specification:
/// `aes-xts-plain64` and `capi:xts(aes)-plain64` are `xts(aes)`. None for
/// forms whose IV generator is itself an algorithm (`essiv`).
fn kernel_algorithm(spec: &str) -> Option<String> {
    if let Some(capi) = spec.strip_prefix("capi:") {
        let alg = capi.rsplit_once('-').map_or(capi, |(a, _)| a);
        return Some(alg.to_string());
    }
    let mut parts = spec.split('-');
    let (cipher, mode) = (parts.next()?, parts.next()?);
    if spec.contains(':') || cipher.is_empty() || mode.is_empty() {
        return None;
    }
    Some(format!("{mode}({cipher})"))
}

/// A LUKS layer's cipher templates (`crypto-xts`) are not needed when the
/// running kernel serves the whole algorithm (`xts(aes)`) from one module the
/// image holds, as aesni_intel does on a CPU with AES-NI: the templates'
/// missing modules become that module, found.
fn ciphers_served_whole(
    c: &mut Check,
    names: &Names,
    tree: &ModuleTree,
    crypt: &crate::stack::Crypt,
    crypto: &[Algorithm],
) {
    for spec in &crypt.ciphers {
        let Some(alg) = kernel_algorithm(spec) else {
            continue;
        };
        let templates = crate::stack::cipher_modules(spec);
        let served = crypto.iter().filter(|a| a.name == alg).find(|a| {
            a.module == "kernel"
                || module_files(tree, &a.module)
                    .is_ok_and(|files| files.iter().all(|f| has_module(names, &tree.kver, f)))
        });
        let Some(by) = served else {
            continue;
        };
        let before = c.missing.len();
        c.missing.retain(|m| {
            !templates
                .iter()
                .any(|t| m.starts_with("module ") && m.ends_with(&format!("({t})")))
        });
        if c.missing.len() != before {
            c.found.push(format!(
                "{alg} (served whole by {} on this machine)",
                by.module
            ));
        }
    }
}

/// The files `query` loads with modprobe's rules in the reference tree:
/// Ok(files to find in the image) or Err(why not).
fn module_files(tree: &ModuleTree, query: &str) -> std::result::Result<Vec<String>, String> {
    let steps = tree
        .show_depends(query, false)
        .ok_or_else(|| format!("no module for `{query}` in the kernel's tree"))?;
    Ok(steps
        .into_iter()
        .filter_map(|p| match p.step {
            Step::Insmod { relpath, .. } => Some(relpath),
            _ => None,
        })
        .collect())
}

/// Whether the image holds the module file `relpath` of kernel `kver`.
fn has_module(names: &Names, kver: &str, relpath: &str) -> bool {
    ["usr/lib/modules", "lib/modules"]
        .iter()
        .any(|b| names.resolve(&format!("{b}/{kver}/{relpath}")).is_some())
}

/// The module name of a file path (`kernel/fs/ext4/ext4.ko.xz` -> `ext4`).
fn module_name(relpath: &str) -> String {
    let base = relpath.rsplit('/').next().unwrap_or(relpath);
    base.split(".ko").next().unwrap_or(base).replace('-', "_")
}

/// Checks `need` (module queries) for one layer.
fn check_modules(c: &mut Check, names: &Names, tree: &ModuleTree, queries: &[String]) {
    for q in queries {
        match module_files(tree, q) {
            Err(e) => c.missing.push(e),
            Ok(files) if files.is_empty() => c.found.push(format!("{q} (built in)")),
            Ok(files) => {
                let lacking: Vec<&String> = files
                    .iter()
                    .filter(|f| !has_module(names, &tree.kver, f))
                    .collect();
                if lacking.is_empty() {
                    c.found.push(q.clone());
                } else {
                    for f in lacking {
                        c.missing.push(format!("module {} ({q})", module_name(f)));
                    }
                }
            }
        }
    }
}

/// A disk: for each device from it up to the bus whose modalias the tree
/// maps to modules, one of them in the image (or built in).
fn check_disk(
    c: &mut Check,
    names: &Names,
    tree: &ModuleTree,
    disk: &crate::stack::Disk,
    firmware: &Firmware,
) {
    for d in &disk.devices {
        let found = tree.lookup(&d.modalias);
        if found.is_empty() {
            continue;
        }
        let mut wanted = Vec::new();
        let mut any = false;
        for f in &found {
            let name = f.obj.name.clone();
            match module_files(tree, &name) {
                Ok(files) if files.iter().all(|r| has_module(names, &tree.kver, r)) => {
                    any = true;
                    let built_in = files.is_empty();
                    c.found.push(if built_in {
                        format!("{name} (built in)")
                    } else {
                        name.clone()
                    });
                    if !built_in {
                        firmware.check(c, names, tree, &name);
                    }
                    break;
                }
                _ => wanted.push(name),
            }
        }
        if !any {
            c.missing.push(format!(
                "a driver for {} (module {})",
                d.path.display(),
                wanted.join(" or ")
            ));
        }
    }
}

/// The firmware a disk's driver asks for (`firmware=` in its modinfo), where
/// the root has it: the driver loads without it but the controller does not
/// come up, so the image must hold it where the kernel's loader looks.
struct Firmware {
    root: crate::resolve::root::Root,
    search: crate::resolve::kmod::firmware::Search,
}

impl Firmware {
    fn new(root: &Path, kver: &str) -> Firmware {
        let root = crate::resolve::root::Root::new(root);
        let search = crate::resolve::kmod::firmware::Search::new(&root, kver);
        Firmware { root, search }
    }

    fn check(&self, c: &mut Check, names: &Names, tree: &ModuleTree, module: &str) {
        let Ok(info) = tree.info(module) else {
            return;
        };
        for fw in info.values("firmware") {
            // Firmware the root lacks cannot be loaded after the switch either.
            if self.search.find(&self.root, fw).is_none() {
                continue;
            }
            if has_firmware(names, &tree.kver, fw) {
                c.found.push(format!("firmware {fw}"));
            } else {
                c.missing
                    .push(format!("firmware {fw} ({module} asks for it)"));
            }
        }
    }
}

/// Whether the image holds firmware `name` where the kernel's loader looks
/// (compressed or not).
fn has_firmware(names: &Names, kver: &str, name: &str) -> bool {
    crate::resolve::kmod::firmware::search_dirs(kver)
        .iter()
        .any(|dir| {
            ["", ".zst", ".xz"].iter().any(|suffix| {
                names
                    .resolve(&format!("{dir}/{name}{suffix}"))
                    .is_some_and(RawEntry::is_regular)
            })
        })
}

/// The image's crypttab line for a LUKS layer, by name or UUID.
fn crypttab_line<'t>(
    lines: &'t [crate::stack::CrypttabEntry],
    c: &crate::stack::Crypt,
) -> Option<&'t crate::stack::CrypttabEntry> {
    lines.iter().find(|l| {
        l.name == c.name
            || matches!(&l.device, crate::stack::DeviceSpec::Uuid(u)
                if c.luks_uuid.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(u)))
    })
}

/// The programs that ask a Tang server for a bound volume's key.
const TANG_PROGRAMS: [&str; 5] = [
    "clevis",
    "clevis-decrypt-tang",
    "clevis-luks-pass",
    "jose",
    "curl",
];

/// What a volume bound to a Tang server (a clevis token) needs for its key
/// to come without a person, that the image lacks: clevis with its tang pin
/// and the tools its scripts run, and composer's glue (the clevis profile;
/// for the systemd init, the agent's units too).
fn tang_missing(names: &Names, systemd: bool) -> Vec<String> {
    let mut lacks: Vec<String> = TANG_PROGRAMS
        .iter()
        .filter(|p| names.program(p).is_none())
        .map(|p| format!("program {p}"))
        .collect();
    if !names.executable("usr/lib/composer/clevis") {
        lacks.push("/usr/lib/composer/clevis".into());
    }
    if systemd {
        for unit in ["composer-clevis.path", "composer-clevis.service"] {
            if names
                .resolve(&format!("usr/lib/systemd/system/{unit}"))
                .is_none()
            {
                lacks.push(format!("/usr/lib/systemd/system/{unit}"));
            }
        }
    }
    lacks
}

/// The note for a Tang-bound volume the image cannot unlock by itself: it
/// still boots, when a person types the passphrase.
fn tang_note(layer: &str, lacks: &[String]) -> String {
    format!(
        "{layer} is bound to a Tang server (a clevis token), but the image lacks {}: \
         the boot waits for its passphrase at the console; the clevis profile \
         (`include = [\"clevis\"]`, which hostonly takes by itself) unlocks it with no person",
        lacks.join(", ")
    )
}

/// How deep each layer sits under the stack's tops.
fn depths(stack: &Stack) -> HashMap<LayerId, usize> {
    let mut d = HashMap::new();
    let mut todo: Vec<(LayerId, usize)> = stack.tops.iter().map(|&t| (t, 0)).collect();
    let mut steps = 0;
    while let Some((id, n)) = todo.pop() {
        steps += 1;
        if steps > 100_000 || id >= stack.layers.len() {
            break;
        }
        if d.get(&id).is_some_and(|&old| old >= n) {
            continue;
        }
        d.insert(id, n);
        for &b in &stack.layers[id].below {
            todo.push((b, n + 1));
        }
    }
    d
}

/// The value of `key=` on the command line (the last one wins, as the
/// kernel's and systemd's parsers take it).
fn cmdline_value<'c>(cmdline: &'c str, key: &str) -> Option<&'c str> {
    cmdline
        .split_whitespace()
        .rev()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Whether `root=` names the filesystem layer `top`.
fn names_root(root: &str, stack: &Stack, top: LayerId) -> bool {
    let layer = &stack.layers[top];
    let Kind::Filesystem(f) = &layer.kind else {
        return false;
    };
    let eq = |a: &str, b: &Option<String>| b.as_deref().is_some_and(|b| a.eq_ignore_ascii_case(b));
    if let Some(u) = root.strip_prefix("UUID=") {
        return eq(u, &f.uuid);
    }
    if let Some(l) = root.strip_prefix("LABEL=") {
        return f.label.as_deref() == Some(l);
    }
    if let Some(u) = root.strip_prefix("/dev/disk/by-uuid/") {
        return eq(u, &f.uuid);
    }
    if let Some(l) = root.strip_prefix("/dev/disk/by-label/") {
        return f.label.as_deref() == Some(l);
    }
    // A device path: the filesystem's device, its source as mounted, or
    // the layer below by its kernel or mapper name.
    let below_names: Vec<String> = layer
        .below
        .iter()
        .filter_map(|&b| stack.layers.get(b))
        .flat_map(|b| {
            let n = b.kind.name().to_string();
            let mut v = vec![
                format!("/dev/{n}"),
                format!("/dev/mapper/{n}"),
                b.dev.clone(),
            ];
            if let Kind::Lvm(l) = &b.kind {
                v.push(format!("/dev/{}/{}", l.vg, l.lv));
                v.push(format!(
                    "/dev/mapper/{}-{}",
                    l.vg.replace('-', "--"),
                    l.lv.replace('-', "--")
                ));
            }
            v
        })
        .collect();
    root == f.device || root == f.source || below_names.iter().any(|n| n == root)
}

/// Checks the image against the stack, the tree and the command line.
pub fn check(inputs: &Inputs) -> Report {
    let names = Names::of(inputs.image);
    let stack = inputs.stack;
    let tree = inputs.tree;
    let mut checks = Vec::new();
    // A live root is a medium's image, not the running machine's stack.
    // gpt-auto without root= only where the firmware can say the boot disk.
    let efi = Path::new("/sys/firmware/efi").exists();
    let image_roots = image_roots::ImageRoots::of(inputs.cmdline).for_firmware(efi);
    let live = image_roots.live.is_some();
    let mut notes: Vec<String> = if live {
        Vec::new()
    } else {
        stack.notes.clone()
    };
    let crypttab = inputs
        .crypttab
        .map(|t| crate::stack::parse_crypttab(t).0)
        .unwrap_or_default();
    let depth = depths(stack);
    let firmware = Firmware::new(inputs.root, &tree.kver);
    let needs = if live {
        Vec::new()
    } else {
        crate::stack::needs(stack)
    };
    let rules = rules::Rules::of(inputs.cmdline);
    let systemd = ["usr/lib/systemd/systemd", "lib/systemd/systemd"]
        .iter()
        .any(|p| names.executable(p));
    // Bottom up: the disks first, the filesystem last.
    for need in needs.iter().rev() {
        let layer = &stack.layers[need.layer];
        let mut c = Check::new(
            crate::stack::describe(stack, need.layer),
            depth.get(&need.layer).copied().unwrap_or(0),
        );
        check_modules(&mut c, &names, tree, &need.modules);
        let shell = need.shell_programs.iter().filter(|_| !systemd);
        for p in need.programs.iter().chain(shell) {
            match names.program(p) {
                Some(_) => c.found.push(p.clone()),
                None => c.missing.push(format!("program {p}")),
            }
        }
        match &layer.kind {
            Kind::Disk(d) => check_disk(&mut c, &names, tree, d, &firmware),
            Kind::Crypt(cr) => {
                ciphers_served_whole(&mut c, &names, tree, cr, inputs.crypto);
                if let Some(key) = crypttab_line(&crypttab, cr).and_then(|l| l.keyfile.as_deref()) {
                    if crate::lower::is_key_path(key) {
                        if names.resolve(key).is_some_and(RawEntry::is_regular) {
                            c.found.push(format!("key file {key}"));
                        } else {
                            c.missing
                                .push(format!("key file {key} (the image's crypttab names it)"));
                        }
                    }
                }
                if cr.clevis_token {
                    let lacks = tang_missing(&names, systemd);
                    if lacks.is_empty() {
                        c.found.push("Tang unlock (clevis)".into());
                    } else {
                        notes.push(tang_note(&c.layer, &lacks));
                    }
                }
            }
            _ => {}
        }
        if !c.ok() {
            c.fix = Some(fix_for(&layer.kind));
        }
        // A layer the command line leaves down: the image cannot help it.
        if let Some(why) = rules.rules_out(stack, need.layer, &crypttab) {
            let fix = if why.contains("crypttab") {
                "the image's /etc/crypttab (or rd.luks.uuid= naming this device)"
            } else {
                "the kernel command line (/etc/kernel/cmdline)"
            };
            c.missing.push(why);
            c.fix = Some(match c.fix.take() {
                Some(f) => format!("{f}; {fix}"),
                None => fix.into(),
            });
        }
        checks.push(c);
    }

    // The init the kernel runs: rdinit=, else /init.
    let rdinit = cmdline_value(inputs.cmdline, "rdinit").unwrap_or("/init");
    let mut c = Check::new("init".into(), 0);
    if names.executable(rdinit) {
        c.found.push(rdinit.to_string());
    } else {
        c.missing
            .push(format!("{rdinit} (an executable the kernel runs)"));
        c.fix = Some("`init = \"systemd\"` or `init = \"shell\"` in the manifest".into());
    }
    checks.push(c);
    // Whether a systemd image's PID 1 can start.
    match pid1::check(inputs.image, &names) {
        Ok(Some(p)) => checks.push(pid1_line(p)),
        Ok(None) => {}
        Err(e) => notes.push(format!("PID 1 was not checked: {e}")),
    }

    // The layers of an image-based root the command line asks for.
    for layer in image_roots.layers(systemd) {
        let mut c = Check::new(layer.name, layer.depth);
        check_modules(&mut c, &names, tree, &layer.modules);
        for p in &layer.programs {
            match names.program(p) {
                Some(_) => c.found.push(p.clone()),
                None => c.missing.push(format!("program {p}")),
            }
        }
        for f in &layer.files {
            if names.resolve(f).is_some() {
                c.found.push(f.clone());
            } else {
                c.missing.push(f.clone());
            }
        }
        c.missing.extend(layer.conflicts);
        if !c.ok() {
            c.fix = Some(layer.fix);
        }
        checks.push(c);
    }

    // The command line names the root the stack has.
    let top = stack
        .tops
        .iter()
        .copied()
        .find(|&t| matches!(&stack.layers[t].kind, Kind::Filesystem(f) if f.mountpoint == "/"));
    let root_arg = cmdline_value(inputs.cmdline, "root");
    match (root_arg, top) {
        _ if image_roots.root_is_elsewhere(root_arg).is_some() => {
            notes.extend(image_roots.root_is_elsewhere(root_arg));
        }
        (Some(root), Some(top)) => {
            let mut c = Check::new(format!("root={root}"), 0);
            if names_root(root, stack, top) {
                c.found.push(crate::stack::describe(stack, top));
            } else {
                c.missing.push(format!(
                    "it does not name the root filesystem ({})",
                    crate::stack::describe(stack, top)
                ));
                c.fix = Some("the kernel command line (/etc/kernel/cmdline)".into());
            }
            checks.push(c);
        }
        (None, _) => notes.push(
            "the command line has no root=, and this machine was not started by UEFI \
             firmware: no root is found at boot (give root=)"
                .into(),
        ),
        (Some(_), None) => notes.push("the stack has no filesystem mounted on /".into()),
    }
    Report {
        image: inputs.image.name.clone(),
        kver: tree.kver.clone(),
        checks,
        notes,
    }
}

/// Whether the image's own PID 1 can start, judged from the image alone
/// (see `pid1`): the check's line, or None when the image's init is not
/// systemd.
pub fn pid1(image: &Image) -> crate::error::Result<Option<Check>> {
    Ok(pid1::check(image, &Names::of(image))?.map(pid1_line))
}

/// The PID 1 check's verdict as a line of check-boot's.
fn pid1_line(p: pid1::Pid1) -> Check {
    let mut c = Check::new(p.layer, 0);
    c.found = p.found;
    c.missing = p.missing;
    if !c.ok() {
        c.fix = Some(pid1::FIX.into());
    }
    c
}

/// The manifest lines that add what a layer lacks.
fn fix_for(kind: &Kind) -> String {
    match kind {
        Kind::Disk(_) => "the controller's module: `modules = [\"NAME\"]`, or the hostonly \
                          or generic profile"
            .into(),
        Kind::Filesystem(f) => format!(
            "`modules = [\"{}\"]` (or the hostonly profile's `[[module]] rootfs = true`)",
            f.fstype
        ),
        Kind::Crypt(_) => "`[stack] from_root = true` (cryptsetup, dm-crypt and the ciphers), \
                           `keyfiles = true` for a key file"
            .into(),
        Kind::Lvm(_) | Kind::Md(_) | Kind::Multipath(_) | Kind::Mapper(_) => {
            "`[stack] from_root = true` (the layer's programs and modules)".into()
        }
        Kind::Partition(_) | Kind::Loop(_) => "`modules = [\"loop\"]`".into(),
        Kind::Verity(_) => "`[stack] from_root = true` or the image-roots profile (dm-verity, \
                            and veritysetup for the shell init)"
            .into(),
    }
}

/// The running machine's stack under `/` and `/usr`, with the crypttab of
/// `root` (read once per process, as a build reads it).
pub fn running_stack(root: &std::path::Path) -> crate::error::Result<Stack> {
    crate::stack::running(root).map_err(|e| {
        crate::error::Error::usage(format!(
            "cannot follow the root filesystem down to its devices: {e}"
        ))
        .with_hint("check-boot reads /proc/self/mountinfo and /sys of the running machine")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_crypto_blocks_give_names_and_modules() {
        let text =
            "name         : xts(aes)\ndriver       : xts-aes-aesni\nmodule       : aesni_intel\n\
                    priority     : 401\n\nname         : aes\ndriver       : aes-generic\n\
                    module       : kernel\n\nname : broken\n";
        assert_eq!(
            parse_crypto(text),
            [
                Algorithm {
                    name: "xts(aes)".into(),
                    module: "aesni_intel".into()
                },
                Algorithm {
                    name: "aes".into(),
                    module: "kernel".into()
                }
            ]
        );
    }

    #[test]
    fn dm_crypt_specs_name_the_kernels_algorithm() {
        assert_eq!(
            kernel_algorithm("aes-xts-plain64").as_deref(),
            Some("xts(aes)")
        );
        assert_eq!(
            kernel_algorithm("serpent-cbc-plain").as_deref(),
            Some("cbc(serpent)")
        );
        assert_eq!(
            kernel_algorithm("capi:xts(aes)-plain64").as_deref(),
            Some("xts(aes)")
        );
        assert_eq!(kernel_algorithm("aes-cbc-essiv:sha256"), None);
        assert_eq!(kernel_algorithm("aes"), None);
    }

    #[test]
    fn the_last_root_on_the_command_line_counts() {
        let c = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro root=UUID=abc quiet";
        assert_eq!(cmdline_value(c, "root"), Some("UUID=abc"));
        assert_eq!(cmdline_value(c, "rdinit"), None);
        assert_eq!(cmdline_value("rootwait rootfstype=ext4", "root"), None);
    }

    /// A newc archive of executables (and directories, for names ending
    /// in `/`).
    fn image_of(names: &[&str]) -> Image {
        use crate::cpio::{header::push_entry, Header, TRAILER_NAME};
        let mut out = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let (name, mode) = match n.strip_suffix('/') {
                Some(d) => (d, 0o40755),
                None => (*n, 0o100755),
            };
            let h = Header {
                ino: i as u32 + 1,
                mode,
                nlink: 1,
                namesize: name.len() as u32 + 1,
                ..Default::default()
            };
            push_entry(&mut out, &h, name.as_bytes(), b"");
        }
        push_entry(&mut out, &Header::trailer(false), TRAILER_NAME, b"");
        Image::from_bytes("t", out)
    }

    /// A LUKS volume bound to a Tang server: an image with clevis, its tang
    /// pin, the tools it runs and composer's glue finds it unlocked with no
    /// person; one without says what it lacks, in a note (the boot goes on
    /// at the passphrase prompt, so no layer fails for it).
    #[test]
    fn a_tang_bound_volume_is_checked_for_what_asks_the_server() {
        use crate::stack::{Crypt, CryptKind, Filesystem, Layer};
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("lib/modules/9.9")).unwrap();
        let root = crate::resolve::root::Root::new(dir.path());
        let tree = ModuleTree::open(&root, "9.9").unwrap();
        let layer = |kind, below| Layer {
            kind,
            sys: None,
            dev: String::new(),
            below,
        };
        let crypt = |clevis_token| Crypt {
            name: "luks-tang".into(),
            kind: CryptKind::Luks2,
            luks_uuid: None,
            crypttab: None,
            ciphers: Vec::new(),
            tpm2_token: false,
            clevis_token,
        };
        let stack = |clevis| Stack {
            layers: vec![
                layer(
                    Kind::Filesystem(Filesystem {
                        fstype: "ext4".into(),
                        device: "254:0".into(),
                        source: "/dev/mapper/luks-tang".into(),
                        mountpoint: "/".into(),
                        uuid: None,
                        label: None,
                    }),
                    vec![1],
                ),
                layer(Kind::Crypt(crypt(clevis)), vec![]),
            ],
            tops: vec![0],
            ..Stack::default()
        };
        let run = |image: &Image, stack: &Stack| {
            let r = check(&Inputs {
                image,
                stack,
                tree: &tree,
                cmdline: "root=/dev/mapper/luks-tang",
                crypttab: None,
                root: dir.path(),
                crypto: &[],
            });
            let luks = r.checks.iter().find(|c| c.layer == "LUKS luks-tang");
            (luks.expect("a LUKS check").clone(), r.notes)
        };
        let mut full = vec!["usr/", "usr/bin/", "usr/lib/", "usr/lib/composer/"];
        // What is checked is what the clevis profile carries.
        let profile = include_str!("../profiles/clevis.toml");
        for p in TANG_PROGRAMS {
            assert!(profile.contains(&format!("    \"{p}\",\n")), "{p}");
        }
        assert!(profile.contains("dst = \"/usr/lib/composer/clevis\""));
        let paths: Vec<String> = TANG_PROGRAMS
            .iter()
            .map(|p| format!("usr/bin/{p}"))
            .collect();
        full.extend(paths.iter().map(String::as_str));
        full.push("usr/lib/composer/clevis");
        let (c, notes) = run(&image_of(&full), &stack(true));
        assert!(c.found.iter().any(|f| f == "Tang unlock (clevis)"), "{c:?}");
        assert!(!notes.iter().any(|n| n.contains("Tang")), "{notes:?}");

        // Without curl and composer's glue: a note naming both.
        let lacking: Vec<&str> = full
            .iter()
            .copied()
            .filter(|p| !p.ends_with("/curl") && !p.ends_with("composer/clevis"))
            .collect();
        let (c, notes) = run(&image_of(&lacking), &stack(true));
        assert!(!c.found.iter().any(|f| f.contains("Tang")), "{c:?}");
        let note = notes
            .iter()
            .find(|n| n.contains("Tang"))
            .expect("a Tang note");
        assert!(
            note.starts_with("LUKS luks-tang is bound to a Tang server")
                && note.contains("lacks program curl, /usr/lib/composer/clevis:")
                && note.contains("`include = [\"clevis\"]`"),
            "{note}"
        );
        // A volume with no clevis token asks nothing of the kind.
        let (c, notes) = run(&image_of(&lacking), &stack(false));
        assert!(!c.found.iter().any(|f| f.contains("Tang")), "{c:?}");
        assert!(!notes.iter().any(|n| n.contains("Tang")), "{notes:?}");

        // The systemd init's agent answers through its units.
        let mut systemd = full.clone();
        systemd.extend(["usr/lib/systemd/", "usr/lib/systemd/systemd"]);
        let (_, notes) = run(&image_of(&systemd), &stack(true));
        let note = notes
            .iter()
            .find(|n| n.contains("Tang"))
            .expect("a Tang note");
        assert!(
            note.contains(
                "lacks /usr/lib/systemd/system/composer-clevis.path, \
                           /usr/lib/systemd/system/composer-clevis.service:"
            ),
            "{note}"
        );
    }

    #[test]
    fn module_names_drop_the_suffix_and_dashes() {
        assert_eq!(module_name("kernel/fs/ext4/ext4.ko.xz"), "ext4");
        assert_eq!(module_name("kernel/drivers/md/dm-crypt.ko"), "dm_crypt");
    }
}
