//! Kernel modules, resolved the way kmod's modprobe resolves them.
//!
//! Input: a source root and a kernel version. Output: a [`ModuleTree`]
//! that answers modprobe's questions (what does this name or alias load,
//! in which order, with which soft dependencies) and the files an image
//! needs so that modprobe works inside it.
//!
//! * `ko`: reading `.ko` files (compressed too): `.modinfo`, exports, imports;
//! * `scan`: finding and reading every module of a tree, on all cores;
//! * `cache`: a scan kept for the next run, used while the tree is unchanged;
//! * `depmod`: dependencies from the symbols, depmod's order and files;
//! * `index`: kmod's binary trie indexes, written and searched as kmod does;
//! * `config`: `modprobe.d` and `modules.softdep`;
//! * `probe`: modprobe's lookup and probe-list rules;
//! * `select`: a set of modules for an image, with the reason for each;
//! * `firmware`, `host`: firmware files, and what the running machine uses;
//! * `kconfig`: the kernel's build options, for the compressions its firmware
//!   loader reads.
//!
//! A tree with kmod's indexes (`modules.dep.bin` and friends) is read
//! through them; a tree with only text metadata through that; a tree with
//! neither (Debian's linux-image package ships none) is scanned: every
//! module is read and depmod's computation runs in process. With
//! [`ModuleTree::open_with`], what the scan read is kept, and the next
//! run over the unchanged tree takes it instead of reading the modules.

mod cache;
mod config;
pub(crate) mod depmod;
mod error;
pub(crate) mod firmware;
pub(crate) mod host;
pub(crate) mod index;
pub(crate) mod kconfig;
pub(crate) mod ko;
mod names;
pub(crate) mod probe;
mod scan;
pub(crate) mod select;
mod tree;

pub use depmod::{
    builtin_alias_index, builtin_alias_index_bytes, builtin_index, builtin_index_bytes,
};
pub use error::KmodError;
pub use host::{scan as scan_host, HostScan};
pub use ko::{is_module_file, modname, parse_bytes as parse_module, KoInfo};
pub use names::{normalize_alias, normalize_modname};
pub use probe::Step;
pub use scan::{list_module_files, read_modules};
pub use tree::{module_dir, ModuleTree, TreeModule, TreeSource};
