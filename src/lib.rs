//! composer: a declarative initramfs composer.
//!
//! The pipeline ([`pipeline`]): a manifest ([`manifest`]) or a
//! gen_init_cpio list ([`list`]) becomes an [`spec::ImageSpec`] of
//! [`entry::Entry`] values under a [`policy::Policy`], with what the
//! filesystem says about them ([`resolve`]); [`plan`] decides every offset
//! and padding byte; [`write`] writes the image atomically. [`image`] and
//! [`extract`] read images back; [`boot_check`] tells whether an image
//! brings up the root's stack. The library returns values and warnings
//! and never prints: the `composer` binary does.

pub mod arch;
pub mod boot_check;
pub mod bytes;
pub mod cache;
pub mod cmdline;
pub mod compress;
pub mod cpio;
pub mod entry;
pub mod error;
pub mod extract;
pub mod fuzzing;
pub mod glob;
pub mod image;
pub mod io;
pub mod list;
pub mod lower;
pub mod manifest;
pub mod origin;
pub mod path;
pub mod pipeline;
pub mod plan;
pub mod policy;
pub mod progress;
pub mod resolve;
pub mod spec;
pub mod stack;
pub mod suggest;
pub mod uki;
pub mod why;
pub mod write;

pub use error::{Error, Result};
