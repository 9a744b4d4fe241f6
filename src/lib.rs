//! composer: a declarative initramfs composer.
//!
//! The pipeline: a list or manifest is read into [`entry::Entry`] values,
//! [`resolve`] reads what the filesystem says about them, [`plan`] decides
//! every offset and padding byte, and [`cpio::writer`] writes the archive
//! through [`output`] (atomically).

pub mod cli;
pub mod compress;
pub mod cpio;
pub mod entry;
pub mod error;
pub mod extract;
pub mod image;
pub mod legacy;
pub mod manifest;
pub mod output;
pub mod pipeline;
pub mod plan;
pub mod resolve;
pub mod segment;

pub use error::{Error, Result};
