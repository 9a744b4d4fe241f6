//! The image spec: what lowering a manifest or reading a list produces,
//! and the one value planning starts from.
//!
//! An image is a sequence of segments, each a complete newc archive,
//! uncompressed or compressed on its own (an uncompressed early segment
//! with CPU microcode, then a compressed main one, as distributions ship
//! initrds). Every segment carries its entries in archive order, with the
//! parent directories of its entries, so that each extracts on its own.
//! The [`Policy`] says how every segment is laid out.

use crate::compress::{Compression, EncodeOptions};
use crate::entry::{Entry, Kind};
use crate::error::Warning;
use crate::policy::Policy;
use crate::resolve::elf::Resolution;

/// The segment that takes every entry no other segment takes.
pub const MAIN: &str = "main";
/// The segment `[early]`'s files go to.
pub const EARLY: &str = "early";

/// One archive of the image.
#[derive(Debug)]
pub struct SegmentSpec {
    pub name: String,
    pub compression: Compression,
    /// None: the method's default.
    pub level: Option<i32>,
    /// Encoder threads; 0: one per CPU.
    pub threads: u32,
    /// Archive bytes per independently compressed piece; 0: one stream.
    pub chunk: u64,
    pub entries: Vec<Entry>,
    /// How many of the first entries are `[early]`'s own (microcode, ACPI
    /// tables, their directories) rather than the manifest's.
    pub early: usize,
}

impl SegmentSpec {
    /// An empty uncompressed segment.
    pub fn new(name: &str, compression: Compression) -> SegmentSpec {
        SegmentSpec {
            name: name.to_string(),
            compression,
            level: None,
            threads: 0,
            chunk: 0,
            entries: Vec::new(),
            early: 0,
        }
    }

    /// The encoder options for this segment on a machine with `cpus` CPUs.
    /// By default at least two threads: multi-threaded zstd and xz write the
    /// same bytes for any number of threads, but not the same as with one,
    /// so the image does not depend on the machine that builds it.
    pub fn encode_options(&self, cpus: u32) -> EncodeOptions {
        let threads = match self.threads {
            0 => cpus.max(2),
            n => n,
        };
        EncodeOptions {
            method: self.compression,
            level: self.level,
            threads,
        }
    }
}

/// A whole image, before planning.
#[derive(Debug)]
pub struct ImageSpec {
    /// In image order; never empty.
    pub segments: Vec<SegmentSpec>,
    pub policy: Policy,
    /// What lowering or reading found worth saying.
    pub warnings: Vec<Warning>,
    /// How `binaries` were resolved, for `composer why`.
    pub elf: Option<Resolution>,
    /// Where the image goes: `-o`, else the manifest's default output.
    pub output: Option<std::path::PathBuf>,
    /// The image holds a secret (a key file, an SSH host key, a file
    /// marked `secret = true`): written 0600 even over a file whose mode was
    /// wider.
    pub private: bool,
    /// `[image] max_size` and where it was set.
    pub max_size: Option<(u64, crate::entry::Origin)>,
    /// The root and kernel a manifest's image is for (None for a list),
    /// for `composer build --check`.
    pub target: Option<BootTarget>,
    /// What `[omit]` took out of what the rules selected.
    pub omitted: Vec<Omitted>,
    /// For `init = "auto"`: which init it chose, and why.
    pub init_choice: Option<String>,
    /// The architecture a manifest's image is for (None for a list).
    pub arch: Option<TargetArch>,
    /// Files composer made for the image (concatenated microcode), kept
    /// until the image is written.
    pub(crate) _scratch: Option<tempfile::TempDir>,
}

/// The architecture an image is built for, and what the documents asked
/// for that it leaves out.
#[derive(Clone, Debug)]
pub struct TargetArch {
    pub arch: crate::arch::Arch,
    /// One line each: `profile generic, line 12: [early] microcode (x86
    /// CPUs only)`.
    pub left_out: Vec<String>,
}

/// What kind of thing an `[omit]` took out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OmittedKind {
    Module,
    Firmware,
    /// An image path (a file, tree, glob or binary rule's).
    File,
}

/// Something the rules selected that an `[omit]` entry took out, for
/// `composer why`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Omitted {
    pub kind: OmittedKind,
    /// The module name, firmware name, or image path (without its `/`).
    pub name: String,
    /// The `[omit]` entry.
    pub by: crate::entry::Origin,
    /// How the entry reads: `[omit] modules "virtio_blk"`.
    pub rule: String,
}

/// The root and kernel an image is built for.
#[derive(Clone, Debug)]
pub struct BootTarget {
    pub root: std::path::PathBuf,
    pub kver: String,
    /// The kernel's module tree when it is not the root's.
    pub kmoddir: Option<std::path::PathBuf>,
    /// The image brings up the running root's own stack (`[stack]
    /// from_root`, the hostonly profile): checked before it is installed.
    pub hostonly: bool,
    /// What the manifest says of a unified kernel image.
    pub uki: UkiConfig,
    /// The architecture the image is for (its root's).
    pub arch: crate::arch::Arch,
}

/// A unified kernel image as the manifest describes it (`[image] uki`,
/// `[uki]`), files resolved; the command line's options replace these.
#[derive(Clone, Debug, Default)]
pub struct UkiConfig {
    /// `[image] uki = true`: build one even without `--uki`.
    pub build: bool,
    pub stub: Option<std::path::PathBuf>,
    pub kernel: Option<std::path::PathBuf>,
    pub cmdline: Option<String>,
    pub splash: Option<std::path::PathBuf>,
    pub devicetree: Option<std::path::PathBuf>,
    pub sign_key: Option<std::path::PathBuf>,
    pub sign_cert: Option<std::path::PathBuf>,
    pub sign_passphrase_file: Option<std::path::PathBuf>,
    /// `[uki] sign_engine`.
    pub sign_engine: Option<String>,
    pub pcr_private_key: Option<std::path::PathBuf>,
    pub pcr_public_key: Option<std::path::PathBuf>,
    /// `[uki] phases`.
    pub phases: Vec<String>,
    /// `[uki] sbat`: lines for the UKI's `.sbat`.
    pub sbat: Vec<String>,
    /// `[uki] microcode`: early cpio files for `.ucode`.
    pub microcode: Vec<std::path::PathBuf>,
    /// `[[uki.profiles]]`, in order.
    pub profiles: Vec<UkiProfileConfig>,
}

/// One `[[uki.profiles]]`: its command line is the UKI's, `cmdline` in its
/// place and `append` after, once the UKI's is known.
#[derive(Clone, Debug, Default)]
pub struct UkiProfileConfig {
    pub id: String,
    pub title: Option<String>,
    pub cmdline: Option<String>,
    pub append: Option<String>,
}

impl ImageSpec {
    /// One uncompressed archive of `entries`.
    pub fn plain(entries: Vec<Entry>, policy: Policy) -> ImageSpec {
        let mut main = SegmentSpec::new(MAIN, Compression::None);
        main.entries = entries;
        ImageSpec {
            segments: vec![main],
            policy,
            warnings: Vec::new(),
            elf: None,
            output: None,
            private: false,
            max_size: None,
            target: None,
            omitted: Vec::new(),
            init_choice: None,
            arch: None,
            _scratch: None,
        }
    }

    /// Whether the image is one uncompressed archive without early files.
    pub fn is_plain(&self) -> bool {
        matches!(self.segments.as_slice(), [s] if s.compression == Compression::None && s.early == 0)
    }

    /// Every entry of every segment, in image order, each name once (a
    /// directory that several segments carry is met in the first).
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        let mut seen = std::collections::HashSet::new();
        self.segments
            .iter()
            .flat_map(|s| s.entries.iter())
            .filter(move |e| e.kind != Kind::Dir || seen.insert(e.name.as_bytes()))
    }

    /// The entries the manifest or list itself asks for (without
    /// `[early]`'s), each name once.
    pub fn own_entries(&self) -> impl Iterator<Item = &Entry> {
        let mut seen = std::collections::HashSet::new();
        self.segments
            .iter()
            .flat_map(|s| s.entries[s.early..].iter())
            .filter(move |e| e.kind != Kind::Dir || seen.insert(e.name.as_bytes()))
    }

    /// The files `[early]` adds, with their directories.
    pub fn early_entries(&self) -> impl Iterator<Item = &Entry> {
        self.segments
            .iter()
            .flat_map(|s| s.entries[..s.early].iter())
    }
}
