//! The manifest: what users write (TOML or YAML), and how it becomes an
//! image spec.
//!
//! * `node`: both formats read into one positioned tree;
//! * `de`: serde over that tree, so every error has a line and column;
//! * `model`: the typed manifest (and the JSON Schema source);
//! * `load`: includes, drop-ins, variables, merged settings;
//! * `lower`: rules to entries (trees, globs, binaries, parents, merged /usr);
//! * `binaries`, `modules`: what `binaries` and module rules add (`item`);
//! * `segments`, `early`: `[[segment]]` and `[early]`;
//! * `systemd`, `stack`: `[systemd]`, and `[stack]` (the running root's
//!   block stack, which `[[module]] rootfs` reads too);
//! * `coldplug`: what each init learns of its cold plug from the build (none
//!   is needed when the image's /init loads every module it holds);
//! * `console`: `[console]` (the keymap and font loaded before a prompt);
//! * `import`: a manifest from a gen_init_cpio list.

mod binaries;
mod coldplug;
pub mod config;
mod console;
pub mod de;
mod early;
pub mod import;
mod item;
mod keys;
pub mod load;
mod lower;
pub mod model;
mod modules;
pub mod node;
mod omit;
mod profiles;
mod segments;
mod stack;
pub mod system;
mod systemd;
mod systemd_handover;
mod systemd_layers;

pub use early::DEFAULT_ACPI_DIR;
pub use load::{load, LoadOptions, Loaded};
pub use lower::lower;
pub use profiles::{
    builtin_names as profile_names, find as find_profile, INSTALLED as PROFILES_INSTALLED,
};
pub(crate) use stack::{is_key_path, running as running_stack};

/// The JSON Schema of the manifest, as `composer schema` prints it.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(model::Manifest);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}
