//! The manifest: the format users write (TOML or YAML) and how its
//! documents compose. What each section means for the image (its lowering
//! into entries) is in [`crate::lower`].
//!
//! * `node`: both formats read into one positioned tree;
//! * `de`: serde over that tree, so every error has a line and column;
//! * `model`: the typed manifest (and the JSON Schema source);
//! * `load`: includes, drop-ins, profiles (`profiles`), the init's choice,
//!   variables, merged settings;
//! * `system`: the system configuration a build without a manifest reads;
//! * `config`: that configuration shown whole (`composer config`);
//! * `import`: a manifest from a gen_init_cpio list.

pub mod config;
pub mod de;
pub mod import;
pub mod load;
pub mod model;
pub mod node;
pub(crate) mod profiles;
pub mod system;

pub use load::{load, LoadOptions, Loaded};
pub use profiles::{
    builtin_names as profile_names, find as find_profile, INSTALLED as PROFILES_INSTALLED,
};

/// The JSON Schema of the manifest, as `composer schema` prints it.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(model::Manifest);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}
