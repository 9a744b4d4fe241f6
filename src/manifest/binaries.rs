//! Glue between `binaries` rules and ELF resolution.

use super::lower::Lowerer;
use crate::entry::Origin;
use crate::error::{Error, Result};

pub(super) fn add(_lw: &mut Lowerer, name: &str, _optional: bool, origin: Origin) -> Result<()> {
    Err(Error::at(
        origin,
        format!("binary `{name}`: ELF resolution is being wired in"),
    ))
}
