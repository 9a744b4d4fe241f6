//! The manifest: what users write (TOML or YAML), and how it becomes entries.
//!
//! * `node`: both formats read into one positioned tree;
//! * `de`: serde over that tree, so every error has a line and column;
//! * `model`: the typed manifest (and the JSON Schema source);
//! * `load`: includes, drop-ins, variables, merged settings;
//! * `lower`: rules to entries (trees, globs, binaries, parents, merged /usr);
//! * `modules`: kernel modules, their firmware and metadata, `composer why`.

mod binaries;
pub mod de;
pub mod import;
pub mod load;
pub mod lower;
pub mod model;
pub mod modules;
pub mod node;

pub use load::{load, LoadOptions, Loaded};
pub use lower::{lower, DefaultAlign, Lowered, MtimeChoice};

/// The JSON Schema of the manifest, as `composer schema` prints it.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(model::Manifest);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}
