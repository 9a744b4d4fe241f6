//! The manifest's typed model: one set of serde types for TOML and YAML,
//! and the source of the JSON Schema (`composer schema`).

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::de::Spanned;
use crate::bytes::SmallBytes;
use crate::compress::Compression;
use crate::policy::AlignMode;
use crate::resolve::elf::DlopenLevel;

/// An initramfs manifest.
#[derive(Deserialize, JsonSchema, Debug, Default)]
#[serde(deny_unknown_fields)]
#[schemars(title = "composer manifest")]
pub struct Manifest {
    /// Other manifests read before this one: paths relative to this file,
    /// or profiles by name (`"generic"`, `"hostonly"`: a name without
    /// .toml/.yaml/.yml, looked up in /etc/composer/profiles, then
    /// /usr/lib/composer/profiles, then the profiles composer carries).
    #[serde(default)]
    pub include: Vec<Spanned<String>>,
    /// The image's /init: `"shell"` (composer's own init for a POSIX sh),
    /// `"systemd"` (the root's systemd in initrd mode), `"auto"` (systemd
    /// when the root can carry the systemd init: systemd, udevadm and the
    /// units it needs; else shell) or `"none"` (the manifest makes /init
    /// itself; the default).
    pub init: Option<Spanned<InitSpec>>,
    /// A directory of drop-in manifests (`*.toml`, `*.yaml`, `*.yml`), read
    /// after this file in name order.
    #[serde(default)]
    pub dropins: Option<Spanned<String>>,
    /// The source root: every source path is looked up inside it. Default `/`.
    #[serde(default)]
    pub root: Option<Spanned<String>>,
    /// Variables for `${name}` in paths. `kver` and `arch` are built in;
    /// `--kver` and `--set name=value` override.
    #[serde(default)]
    pub vars: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub defaults: Option<Spanned<Defaults>>,
    #[serde(default)]
    pub image: Option<Spanned<ImageSettings>>,
    /// Executables to include with the libraries they load (by name on the
    /// search path, or by absolute path).
    #[serde(default)]
    pub binaries: Vec<Spanned<String>>,
    #[serde(default)]
    pub binary: Vec<Spanned<BinaryRule>>,
    /// How `binaries` are resolved.
    #[serde(default)]
    pub elf: Option<Spanned<ElfSettings>>,
    /// Kernel modules by name or alias (`ext4`, `fs-ext4`), with the
    /// modules they need, as modprobe loads them.
    #[serde(default)]
    pub modules: Vec<Spanned<String>>,
    /// Module selections with patterns, exclusions or host mode.
    #[serde(default)]
    pub module: Vec<Spanned<ModuleRule>>,
    /// Which firmware files of the included modules to take.
    #[serde(default)]
    pub firmware: Option<Spanned<FirmwareSettings>>,
    /// What to leave out of what this document and the documents read
    /// before it (its includes, the profiles) select: modules, firmware,
    /// files and units. Documents read after it are not affected.
    #[serde(default)]
    pub omit: Option<Spanned<OmitSettings>>,
    #[serde(default)]
    pub file: Vec<Spanned<FileRule>>,
    #[serde(default)]
    pub dir: Vec<Spanned<DirRule>>,
    #[serde(default)]
    pub symlink: Vec<Spanned<SymlinkRule>>,
    #[serde(default)]
    pub hardlink: Vec<Spanned<HardlinkRule>>,
    #[serde(default)]
    pub node: Vec<Spanned<NodeRule>>,
    #[serde(default)]
    pub pipe: Vec<Spanned<SpecialRule>>,
    #[serde(default)]
    pub socket: Vec<Spanned<SpecialRule>>,
    #[serde(default)]
    pub tree: Vec<Spanned<TreeRule>>,
    #[serde(default)]
    pub glob: Vec<Spanned<GlobRule>>,
    /// The image as several concatenated archives, in order, each
    /// compressed or not. An entry goes to the first segment whose `paths`
    /// match it; the rest go to the main segment.
    #[serde(default)]
    pub segment: Vec<Spanned<SegmentRule>>,
    /// An uncompressed first segment with CPU microcode and ACPI table
    /// overrides, for the kernel's early loaders.
    #[serde(default)]
    pub early: Option<Spanned<EarlySettings>>,
    /// Units of the root's systemd with what they pull in and run,
    /// generators, and udev rules with their helpers.
    #[serde(default)]
    pub systemd: Option<Spanned<SystemdSettings>>,
    /// The running root's block stack (LUKS, LVM, md RAID under `/` and
    /// `/usr`): the programs its layers need and the configuration written
    /// from it.
    #[serde(default)]
    pub stack: Option<Spanned<StackSettings>>,
    /// The console keymap and font the image loads before it asks for a
    /// passphrase.
    #[serde(default)]
    pub console: Option<Spanned<ConsoleSettings>>,
    /// What a unified kernel image holds besides the image (`composer build
    /// --uki`, or `[image] uki = true`).
    #[serde(default)]
    pub uki: Option<Spanned<UkiSettings>>,
}

/// `[uki]`: the parts of a unified kernel image. Files are absolute in the
/// root or relative to the manifest; a later document's setting replaces an
/// earlier one's, and the command line's options replace both.
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct UkiSettings {
    /// systemd's EFI stub (default: `/usr/lib/systemd/boot/efi/linuxx64.efi.stub`).
    #[serde(default)]
    pub stub: Option<String>,
    /// The kernel image (default: `/boot/vmlinuz-${kver}`, else
    /// `/usr/lib/modules/${kver}/vmlinuz`).
    #[serde(default)]
    pub kernel: Option<String>,
    /// The kernel command line (default: the root's `/etc/kernel/cmdline`,
    /// else the running boot's).
    #[serde(default)]
    pub cmdline: Option<String>,
    /// A boot splash (BMP) the stub shows.
    #[serde(default)]
    pub splash: Option<String>,
    /// A device tree blob the stub installs.
    #[serde(default)]
    pub devicetree: Option<String>,
    /// Sign the UKI for Secure Boot with this key (PEM, with `sign_cert`),
    /// or a key on a PKCS#11 token (a `pkcs11:` URI).
    #[serde(default)]
    pub sign_key: Option<String>,
    /// The OpenSSL engine that holds `sign_key` (`pkcs11`, the default for
    /// a `pkcs11:` URI).
    #[serde(default)]
    pub sign_engine: Option<String>,
    /// The certificate (PEM) of `sign_key`.
    #[serde(default)]
    pub sign_cert: Option<String>,
    /// The file whose first line is the passphrase of an encrypted
    /// `sign_key` (without it, openssl asks on the terminal).
    #[serde(default)]
    pub sign_passphrase_file: Option<String>,
    /// Sign PCR 11 policies for the UKI's sections with this RSA key (PEM):
    /// `.pcrsig` and `.pcrpkey`, for volumes enrolled with
    /// `systemd-cryptenroll --tpm2-public-key=`.
    #[serde(default)]
    pub pcr_private_key: Option<String>,
    /// The public key (PEM) of `pcr_private_key` (default: derived from it).
    #[serde(default)]
    pub pcr_public_key: Option<String>,
    /// The boot phases the policies are signed for (default: `enter-initrd`,
    /// `enter-initrd:leave-initrd`, `enter-initrd:leave-initrd:sysinit`,
    /// `enter-initrd:leave-initrd:sysinit:ready`).
    #[serde(default)]
    pub phases: Option<Vec<String>>,
    /// SBAT lines for the UKI's `.sbat`, after the stub's, the kernel's and
    /// composer's (`name,generation,vendor,package,version,url`).
    #[serde(default)]
    pub sbat: Option<Vec<String>>,
    /// CPU microcode archives (early cpio files, such as Arch's
    /// `intel-ucode.img`), in order: the UKI's `.ucode` with a stub of
    /// systemd 256 or later, else first in its `.initrd`.
    #[serde(default)]
    pub microcode: Option<Vec<String>>,
    /// Profiles (systemd 257's stub and later): one UKI, several command
    /// lines, each a menu entry of systemd-boot (`FILE@ID`). The first is
    /// what a boot without a choice starts.
    #[serde(default)]
    pub profiles: Option<Vec<UkiProfileSettings>>,
}

/// `[[uki.profiles]]`: one profile of a UKI.
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct UkiProfileSettings {
    /// Its ID: lower-case letters, digits, `.`, `_` and `-` (systemd-boot's
    /// entry `FILE@ID`).
    pub id: String,
    /// The title a boot menu shows beside the OS's name.
    #[serde(default)]
    pub title: Option<String>,
    /// Its command line, in place of the UKI's.
    #[serde(default)]
    pub cmdline: Option<String>,
    /// Words added to the UKI's command line (with `cmdline`: to that).
    #[serde(default)]
    pub append: Option<String>,
}

/// `[console]`: the keymap and font loaded on the console before anything
/// asks for a passphrase. A later document's setting replaces an earlier
/// one's; `keymap` and `font` replace what `from_root` reads.
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSettings {
    /// Take the root's own: `/etc/vconsole.conf` (`KEYMAP=`, `FONT=`), else
    /// the keymap and font Debian's console-setup cached in
    /// `/etc/console-setup`. Nothing is added when the root has neither.
    #[serde(default)]
    pub from_root: Option<bool>,
    /// A keymap: a name (`de`, `fr-latin1`) looked up under the root's
    /// keymap directories, or a file (a path with a `/`: absolute in the
    /// root, else relative to the manifest). Its includes are inlined.
    #[serde(default)]
    pub keymap: Option<String>,
    /// A console font: a name (`eurlatgr`, `Lat15-Fixed16`) looked up under
    /// the root's console font directories, or a file, as for `keymap`.
    #[serde(default)]
    pub font: Option<String>,
}

/// `[stack]`: the image brings up the running root's own block stack. A
/// later document's setting replaces an earlier one's.
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct StackSettings {
    /// Read the stack under `/` and `/usr` of the running machine: add the
    /// programs its layers need (cryptsetup, lvm, thin_check, mdadm, btrfs)
    /// and write `/etc/crypttab`, `/etc/mdadm/mdadm.conf` and
    /// `/etc/lvm/lvm.conf` for exactly those layers (never the root's files
    /// as they are).
    #[serde(default)]
    pub from_root: Option<bool>,
    /// Also take the key files the root's crypttab names for those LUKS
    /// devices (default false: the image asks for the passphrase). The
    /// image then holds keys: the build warns, and the image is 0600.
    #[serde(default)]
    pub keyfiles: Option<bool>,
}

/// The root's systemd in the image (lists add up over the documents).
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct SystemdSettings {
    /// Units by name (`initrd.target`), taken with their drop-ins, the units
    /// they pull in and the programs they run.
    #[serde(default)]
    pub units: Vec<Spanned<String>>,
    /// Units taken, as `units`, when the root has them (those of
    /// cryptsetup, lvm2 or mdadm), without a warning when it does not.
    #[serde(default)]
    pub units_if_present: Vec<Spanned<String>>,
    /// Units never taken, by name or glob (`dev-hugepages.mount`,
    /// `dracut-*`): the links that pull them in are left out too.
    #[serde(default)]
    pub exclude_units: Vec<Spanned<String>>,
    /// Generators by name (`systemd-fstab-generator`).
    #[serde(default)]
    pub generators: Vec<Spanned<String>>,
    /// Generators taken when the root has them, without an error when it
    /// does not (`systemd-cryptsetup-generator`).
    #[serde(default)]
    pub generators_if_present: Vec<Spanned<String>>,
    /// udev rules files by name (`60-persistent-storage.rules`), with the
    /// helpers they run.
    #[serde(default)]
    pub udev_rules: Vec<Spanned<String>>,
    /// udev rules files taken, with their helpers, when the root has them
    /// (those device-mapper, lvm2 or mdadm install), without a warning when
    /// it does not.
    #[serde(default)]
    pub udev_rules_if_present: Vec<Spanned<String>>,
    /// Names in the lists above (units, generators, udev rules files) that
    /// only one layer of a block stack, or hibernation, needs. An image
    /// whose `[stack]` is read from the root (hostonly) leaves out those of
    /// the layers its machine does not have, with the links that pull them
    /// in; other images take them all.
    #[serde(default)]
    pub layers: SystemdLayers,
}

/// `[systemd.layers]`: what each layer needs, by name.
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct SystemdLayers {
    /// LUKS (`systemd-cryptsetup-generator`, `cryptsetup.target`).
    #[serde(default)]
    pub crypt: Vec<Spanned<String>>,
    /// LVM (`69-lvm.rules`).
    #[serde(default)]
    pub lvm: Vec<Spanned<String>>,
    /// md RAID (`64-md-raid-assembly.rules`, `mdadm-last-resort@.timer`).
    #[serde(default)]
    pub md: Vec<Spanned<String>>,
    /// Any device-mapper layer: LUKS, LVM, multipath (`55-dm.rules`).
    #[serde(default)]
    pub dm: Vec<Spanned<String>>,
    /// Resume from hibernation (`systemd-hibernate-resume-generator`): the
    /// machine has a swap device in use or a `resume=` on its command line.
    #[serde(default)]
    pub resume: Vec<Spanned<String>>,
}

#[derive(Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum InitSpec {
    None,
    Shell,
    Systemd,
    Auto,
}

/// One archive of the image.
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct SegmentRule {
    /// The segment's name. Documents that name the same segment configure
    /// one segment. `"main"` takes every entry no other segment takes
    /// (default: the last segment); `"early"` receives `[early]`'s files.
    pub name: Option<Spanned<String>>,
    /// `"none"` (default), `"gzip"`, `"zstd"`, `"xz"`, `"lzma"`, `"bzip2"`
    /// or `"lz4"` (the kernel's legacy lz4 format).
    pub compression: Option<Spanned<Compression>>,
    /// Compression level: gzip and bzip2 1-9 (default 9), xz and lzma 0-9
    /// (default 6), zstd 1-19 (default 3).
    pub level: Option<Spanned<i32>>,
    /// Compression threads for zstd, xz and lz4, at most 256; 0
    /// (default): one per CPU.
    pub threads: Option<Spanned<u32>>,
    /// Bytes of archive (before compression) per independently compressed
    /// piece: the segment is cut at entry boundaries into archives of about
    /// this size, compressed on every core and written one after another.
    /// The kernel unpacks them all; tools that decompress one stream
    /// (`zcat | cpio`, bsdtar, 3cpio) see only the first. For gzip, bzip2
    /// and lzma, whose encoders use one core. 0 (default): one stream.
    pub chunk_size: Option<Spanned<u64>>,
    /// Glob patterns of image paths this segment takes (`**/*.ko.zst`).
    #[serde(default)]
    pub paths: Vec<Spanned<String>>,
    /// Patterns that match nothing are no warning (default false).
    pub optional: Option<bool>,
}

/// What the early (first, uncompressed) segment holds.
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct EarlySettings {
    /// CPU microcode as kernel/x86/microcode/GenuineIntel.bin and
    /// AuthenticAMD.bin (default false).
    pub microcode: Option<bool>,
    /// A root without microcode or ACPI tables is no warning (default false).
    pub optional: Option<bool>,
    /// Intel microcode: a directory whose files are concatenated, or a
    /// prebuilt GenuineIntel.bin. Default: the root's
    /// /usr/lib/firmware/intel-ucode or /lib/firmware/intel-ucode.
    pub intel_microcode: Option<Spanned<PathText>>,
    /// AMD microcode: a directory whose `*.bin` files are concatenated, or
    /// a prebuilt AuthenticAMD.bin. Default: the root's
    /// /usr/lib/firmware/amd-ucode or /lib/firmware/amd-ucode.
    pub amd_microcode: Option<Spanned<PathText>>,
    /// ACPI table overrides: the `*.aml` files of `acpi_dir` as
    /// kernel/firmware/acpi/*.aml (default false).
    pub acpi: Option<bool>,
    /// Where the ACPI tables are. Default /etc/composer/acpi in the root.
    pub acpi_dir: Option<Spanned<PathText>>,
}

/// Values used where an entry says nothing.
#[derive(Deserialize, JsonSchema, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// Owner of every entry that names none. Default 0.
    pub uid: Option<u32>,
    /// Group of every entry that names none. Default 0.
    pub gid: Option<u32>,
    /// Mode of files that name none: `"source"` (default) keeps the source's
    /// permission bits.
    pub file_mode: Option<ModeOrSource>,
    /// Mode of directories that name none, including the parent directories
    /// created automatically. Default `"0755"`.
    pub dir_mode: Option<Mode>,
    /// mtime policy: `"source"` (default: files and tree entries keep their
    /// source's mtime, other entries get 0), a number of seconds for every
    /// entry, or `"source-date-epoch"` (SOURCE_DATE_EPOCH, required). When
    /// SOURCE_DATE_EPOCH is set, `"source"` uses it for every entry too.
    pub mtime: Option<MtimePolicySpec>,
    /// Data alignment: bytes (a power of two), `"none"` (default), or
    /// `"auto"` (the block size of the output's filesystem).
    pub align: Option<AlignSpec>,
}

/// How entries are arranged in the archive.
#[derive(Deserialize, JsonSchema, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct ImageSettings {
    /// `"sorted"` (default): by path, which puts every directory before its
    /// content. `"manifest"`: in the order written (includes first).
    pub order: Option<Order>,
    /// Create missing parent directories (default true).
    pub parents: Option<bool>,
    /// Where `composer build` writes the image when `-o` is not given,
    /// inside the root; default `/boot/initrd.img-${kver}`.
    pub output: Option<Spanned<PathText>>,
    /// How data alignment is reached: `"readers"` (default: reorder, fill
    /// gaps with small entries, pad names and repeat directory entries; every
    /// reader extracts the archive), `"kernel-only"` (NUL runs between
    /// entries: least padding, but only the kernel reads it), or
    /// `"gen-init-cpio"` (its rule: keep the order, pad only the file's own
    /// name, miss past PATH_MAX).
    pub align_mode: Option<AlignMode>,
    /// Share file data with the sources where the filesystem can (XFS,
    /// Btrfs: copy_file_range clones aligned blocks), default true. `false`
    /// copies every byte through memory, so that later writes to the image
    /// or to a source pay no copy-on-write (see the book's benchmarks).
    pub reflink: Option<bool>,
    /// The most the image may take on disk: bytes, or a number with `K`,
    /// `M` or `G` (powers of 1024), e.g. `"48M"`. A larger image is refused
    /// before anything is written, as one that does not fit the output's
    /// free space is.
    pub max_size: Option<Spanned<SizeSpec>>,
    /// Write a unified kernel image (`[uki]` says what goes in it) instead of
    /// the image alone, as `composer build --uki` does.
    pub uki: Option<bool>,
}

/// A size: bytes, or a string with a `K`, `M` or `G` suffix.
#[derive(Deserialize, JsonSchema, Debug, Clone, PartialEq, Eq)]
#[serde(untagged)]
pub enum SizeSpec {
    Bytes(u64),
    Text(String),
}

impl SizeSpec {
    /// The size in bytes, or None for text that is not a size.
    pub fn bytes(&self) -> Option<u64> {
        match self {
            SizeSpec::Bytes(n) => Some(*n),
            SizeSpec::Text(t) => {
                let t = t.trim();
                let (num, shift) = match t.chars().last()? {
                    'K' | 'k' => (&t[..t.len() - 1], 10),
                    'M' | 'm' => (&t[..t.len() - 1], 20),
                    'G' | 'g' => (&t[..t.len() - 1], 30),
                    _ => (t, 0),
                };
                num.trim().parse::<u64>().ok()?.checked_mul(1u64 << shift)
            }
        }
    }
}

#[derive(Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    Sorted,
    Manifest,
}

/// A regular file copied from the source root.
#[derive(Deserialize, JsonSchema, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct FileRule {
    /// The source: an absolute path is looked up inside the root, a
    /// relative one beside this manifest.
    pub src: Spanned<PathText>,
    /// Path in the image; default the source's path.
    pub dst: Option<Spanned<PathText>>,
    pub mode: Option<Mode>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub align: Option<AlignSpec>,
    /// Skip the rule, instead of failing, when the source does not exist.
    #[serde(default)]
    pub optional: bool,
    /// The file is a secret (a private key, a password): the build names
    /// it, and the image is written 0600 even over a file that allowed more.
    #[serde(default)]
    pub secret: bool,
}

#[derive(Deserialize, JsonSchema, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct DirRule {
    pub path: Spanned<PathText>,
    pub mode: Option<Mode>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

#[derive(Deserialize, JsonSchema, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct SymlinkRule {
    pub path: Spanned<PathText>,
    /// What the link points to, stored as written.
    pub target: Spanned<PathText>,
    pub mode: Option<Mode>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// Another name for a file that is already in the image.
#[derive(Deserialize, JsonSchema, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct HardlinkRule {
    pub path: Spanned<PathText>,
    /// The image path of the file this name links to.
    pub target: Spanned<PathText>,
}

#[derive(Deserialize, JsonSchema, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct NodeRule {
    pub path: Spanned<PathText>,
    #[serde(rename = "type")]
    pub kind: NodeType,
    pub major: u32,
    pub minor: u32,
    pub mode: Option<Mode>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

#[derive(Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NodeType {
    Char,
    Block,
}

/// A named pipe or a socket.
#[derive(Deserialize, JsonSchema, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct SpecialRule {
    pub path: Spanned<PathText>,
    pub mode: Option<Mode>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// A source directory copied recursively.
#[derive(Deserialize, JsonSchema, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct TreeRule {
    /// The source directory: absolute inside the root, relative beside this
    /// manifest.
    pub src: Spanned<PathText>,
    /// Where it goes in the image; default the same path.
    pub dst: Option<Spanned<PathText>>,
    /// Glob patterns, relative to `src`, of the files to take (default all).
    #[serde(default)]
    pub include: Vec<Spanned<String>>,
    /// Glob patterns, relative to `src`, of files and directories to leave out.
    #[serde(default)]
    pub exclude: Vec<Spanned<String>>,
    pub align: Option<AlignSpec>,
    #[serde(default)]
    pub optional: bool,
    /// Every regular file the tree takes is a secret, as a file's `secret`.
    #[serde(default)]
    pub secret: bool,
}

/// Files matching glob patterns in the source root.
#[derive(Deserialize, JsonSchema, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct GlobRule {
    /// Absolute glob patterns inside the root (`*`, `?`, `[...]`, `{a,b}`, `**`).
    pub patterns: Vec<Spanned<String>>,
    /// A directory in the image for the matches, which keep their path
    /// relative to the pattern's fixed leading directories. Default: the
    /// matches keep their own paths.
    pub dst: Option<Spanned<PathText>>,
    pub align: Option<AlignSpec>,
    /// Accept patterns that match nothing.
    #[serde(default)]
    pub optional: bool,
    /// Every regular file the patterns match is a secret, as a file's
    /// `secret`.
    #[serde(default)]
    pub secret: bool,
}

#[derive(Deserialize, JsonSchema, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct BinaryRule {
    /// A name looked up on the search path, or an absolute path.
    pub name: Spanned<String>,
    /// Skip, instead of failing, when the binary or a library is missing.
    #[serde(default)]
    pub optional: bool,
    /// When the root has no program of this name but its busybox has an
    /// applet of it, take busybox and link the name to it (said at build
    /// time): Debian's util-linux no longer ships `switch_root` from
    /// Debian 14 on, while busybox still has the applet.
    #[serde(default)]
    pub applet: bool,
}

/// A selection of kernel modules (of the kernel `${kver}` in the root).
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct ModuleRule {
    /// Module names or aliases, as for `modprobe NAME`.
    #[serde(default)]
    pub names: Vec<Spanned<String>>,
    /// Glob patterns of module files relative to the module directory,
    /// e.g. `kernel/drivers/block/**`.
    #[serde(default)]
    pub patterns: Vec<Spanned<String>>,
    /// Module names or file patterns this rule leaves out. Hard
    /// dependencies of what it takes are kept.
    #[serde(default)]
    pub exclude: Vec<Spanned<String>>,
    /// The modules the running machine uses: its devices' modaliases
    /// matched against the tree's aliases, and what /proc/modules lists.
    #[serde(default)]
    pub host: bool,
    /// The modules the running machine needs to reach its root filesystem:
    /// every device from the root's block device (through partitions and
    /// device-mapper or md slaves) up to its controller, and the root's
    /// filesystem type; plus its keyboards.
    #[serde(default)]
    pub rootfs: bool,
    /// Also list the names of this rule in /etc/modules-load.d/composer.conf,
    /// so the init loads them at boot whether a device asks or not.
    #[serde(default)]
    pub load: bool,
    /// Skip names that match no module instead of failing.
    #[serde(default)]
    pub optional: bool,
    /// Take the firmware files the selected modules ask for (default true).
    pub firmware: Option<bool>,
    /// Only for images of these architectures, as `uname -m` names them
    /// (`x86_64`, `aarch64`, `riscv64`, ...) or as Debian does (`amd64`,
    /// `arm64`); the image's architecture is its root's. Default: every
    /// architecture.
    #[serde(default)]
    pub arch: Vec<Spanned<String>>,
}

/// Firmware of the included modules.
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct FirmwareSettings {
    /// Glob patterns of firmware names to take (default: all).
    #[serde(default)]
    pub include: Vec<Spanned<String>>,
    /// Glob patterns of firmware names to leave out.
    #[serde(default)]
    pub exclude: Vec<Spanned<String>>,
}

/// `[omit]`: leaves out what this document and the documents read before
/// it select, whichever rule selected it. A module that a module the image
/// keeps needs (a hard dependency) stays, and the build says which.
#[derive(Deserialize, JsonSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct OmitSettings {
    /// Kernel modules: names (`virtio_blk`, `floppy`), or patterns of
    /// module files relative to the kernel's module directory
    /// (`kernel/drivers/gpu/**`). Their soft dependencies are not taken
    /// for them either.
    #[serde(default)]
    pub modules: Vec<Spanned<String>>,
    /// Glob patterns of firmware names (`iwlwifi-*`, `amdgpu/*`).
    #[serde(default)]
    pub firmware: Vec<Spanned<String>>,
    /// Image paths or glob patterns of them (`/usr/bin/less`,
    /// `/usr/share/kbd/**`): what a file, tree, glob or binary rule would
    /// put there, and everything under a directory named. An executable
    /// left out takes no library with it that nothing else loads.
    #[serde(default)]
    pub files: Vec<Spanned<String>>,
    /// systemd units, by name or glob (`systemd-vconsole-setup.service`),
    /// as `[systemd] exclude_units`.
    #[serde(default)]
    pub units: Vec<Spanned<String>>,
}

/// Options for resolving binaries and the libraries they load.
#[derive(Deserialize, JsonSchema, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct ElfSettings {
    /// Directories (inside the root) searched for binaries named without a
    /// `/`. Default: /usr/local/sbin, /usr/local/bin, /usr/sbin, /usr/bin,
    /// /sbin, /bin.
    pub search_path: Option<Vec<String>>,
    /// CPU-specific glibc-hwcaps library variants: `false` (default: the
    /// image runs on any CPU of the architecture), `true` (those this
    /// machine's CPU supports), or a list of subdirectory names such as
    /// `["x86-64-v3"]`.
    pub hwcaps: Option<HwcapsSpec>,
    /// Which `.note.dlopen` dependencies to include.
    pub dlopen: Option<DlopenLevel>,
    /// Extra libraries by soname (e.g. `libnss_files.so.2`), with their
    /// dependencies.
    #[serde(default)]
    pub libraries: Vec<Spanned<String>>,
    /// Libraries by soname taken, as `libraries`, when the root has them,
    /// without a word when it does not (those systemd loads at run time for
    /// an optional feature, such as the TPM2 libraries).
    #[serde(default)]
    pub libraries_if_present: Vec<Spanned<String>>,
}

/// `true`, `false`, or a list of glibc-hwcaps subdirectory names.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[schemars(untagged)]
pub enum HwcapsSpec {
    Enabled(bool),
    Only(Vec<String>),
}

impl<'de> Deserialize<'de> for HwcapsSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = HwcapsSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("true, false, or a list of glibc-hwcaps names")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<HwcapsSpec, E> {
                Ok(HwcapsSpec::Enabled(b))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<HwcapsSpec, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    v.push(s);
                }
                Ok(HwcapsSpec::Only(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A path: a string, or `{ escaped = '...' }` with `\xHH` escapes for bytes
/// that are not UTF-8 (and `\\` for a backslash).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathText(pub SmallBytes);

impl JsonSchema for PathText {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PathText".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A path. Non-UTF-8 bytes: { \"escaped\": \"\\\\xff\" }.",
            "anyOf": [
                { "type": "string" },
                {
                    "type": "object",
                    "properties": { "escaped": { "type": "string" } },
                    "required": ["escaped"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

/// Decodes `\xHH` and `\\`; other backslashes stay as they are (the
/// inverse of [`crate::path::escape`]).
pub fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            match b.get(i + 1) {
                Some(b'\\') => {
                    out.push(b'\\');
                    i += 2;
                    continue;
                }
                Some(b'x') => {
                    let hex = s.get(i + 2..i + 4).unwrap_or("");
                    let v = u8::from_str_radix(hex, 16)
                        .map_err(|_| format!("`\\x{hex}` is not a two-digit hex escape"))?;
                    out.push(v);
                    i += 4;
                    continue;
                }
                _ => {}
            }
        }
        out.push(b[i]);
        i += 1;
    }
    Ok(out)
}

impl<'de> Deserialize<'de> for PathText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PathText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a path string, or { escaped = '...' }")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<PathText, E> {
                Ok(PathText(s.as_bytes().into()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PathText, A::Error> {
                let mut out = None;
                while let Some(k) = map.next_key::<String>()? {
                    if k != "escaped" {
                        return Err(de::Error::unknown_field(&k, &["escaped"]));
                    }
                    let s: String = map.next_value()?;
                    out = Some(unescape(&s).map_err(de::Error::custom)?);
                }
                out.map(|b: Vec<u8>| PathText(b.into()))
                    .ok_or_else(|| de::Error::missing_field("escaped"))
            }
        }
        d.deserialize_any(V)
    }
}

/// Permission bits, written as an octal string such as `"0755"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mode(pub u32);

impl JsonSchema for Mode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Mode".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Permission bits as an octal string, e.g. \"0755\" (at most 07777).",
            "type": "string",
            "pattern": "^0?[0-7]{1,4}$"
        })
    }
}

fn parse_mode<E: de::Error>(s: &str) -> Result<Mode, E> {
    let ok = !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match u32::from_str_radix(s, 8) {
        Ok(v) if ok && v <= 0o7777 => Ok(Mode(v)),
        _ => Err(E::custom(format!(
            "mode `{s}` is not an octal permission string (\"0000\" to \"07777\")"
        ))),
    }
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Mode;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an octal mode string such as \"0755\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Mode, E> {
                parse_mode(s)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Mode, E> {
                Err(E::custom(format!(
                    "mode {v} is a number; write modes as octal strings, e.g. mode = \"0755\" \
                     (a bare 755 would be decimal)"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// A mode, or `"source"` to keep the source's permission bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[schemars(with = "String")]
pub enum ModeOrSource {
    Source,
    Mode(Mode),
}

impl<'de> Deserialize<'de> for ModeOrSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ModeOrSource;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"source\" or an octal mode string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ModeOrSource, E> {
                if s == "source" {
                    Ok(ModeOrSource::Source)
                } else {
                    parse_mode(s).map(ModeOrSource::Mode)
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `"source"`, `"source-date-epoch"`, or seconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[schemars(untagged)]
pub enum MtimePolicySpec {
    #[schemars(with = "String")]
    Source,
    #[schemars(with = "String")]
    SourceDateEpoch,
    Fixed(u32),
}

impl<'de> Deserialize<'de> for MtimePolicySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MtimePolicySpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"source\", \"source-date-epoch\" or seconds since the epoch")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<MtimePolicySpec, E> {
                match s {
                    "source" => Ok(MtimePolicySpec::Source),
                    "source-date-epoch" => Ok(MtimePolicySpec::SourceDateEpoch),
                    _ => Err(E::unknown_variant(s, &["source", "source-date-epoch"])),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MtimePolicySpec, E> {
                u32::try_from(v).map(MtimePolicySpec::Fixed).map_err(|_| {
                    E::custom(format!(
                        "mtime {v} does not fit the cpio header (0 to 4294967295)"
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Bytes (a power of two), `"none"`, or (in defaults) `"auto"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[schemars(untagged)]
pub enum AlignSpec {
    Bytes(u32),
    #[schemars(with = "String")]
    None,
    #[schemars(with = "String")]
    Auto,
}

impl<'de> Deserialize<'de> for AlignSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = AlignSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a power of two, \"none\" or \"auto\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<AlignSpec, E> {
                match s {
                    "none" => Ok(AlignSpec::None),
                    "auto" => Ok(AlignSpec::Auto),
                    _ => Err(E::unknown_variant(s, &["none", "auto"])),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<AlignSpec, E> {
                const MAX: i64 = 1 << 31;
                match v {
                    0 => Ok(AlignSpec::None),
                    n if n > MAX => Err(E::custom(format!(
                        "alignment {v} is larger than {MAX}, the largest power of two a cpio \
                         size field can hold"
                    ))),
                    n if n >= 4 && (n as u64).is_power_of_two() => Ok(AlignSpec::Bytes(n as u32)),
                    _ => Err(E::custom(format!(
                        "alignment {v} is not a power of two of at least 4"
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}
