//! Plan: decide every offset and every padding byte before anything is
//! written.
//!
//! Input: an [`ImageSpec`] (sources already stat'ed), or one archive's
//! entries and a [`Policy`]. Output: an [`ImageLayout`] (or one
//! [`Layout`]), a pure value that the writer turns into bytes without
//! further decisions. Nothing here touches the disk.
//!
//! * `layout`: the layout types and the records they are built from;
//! * `in_order`: gen_init_cpio's rule, in the given order;
//! * `planner`: readers and kernel-only modes, reordering and spreading
//!   padding so that every eligible file is aligned;
//! * `image`: segments one after another, with the gaps the kernel needs;
//! * `report`: `composer plan`'s tables and JSON.

mod archive;
mod image;
mod in_order;
mod layout;
mod planner;
pub mod report;

pub use image::{gap_before, Chunk, ImageLayout, PartLayout};
pub use layout::{Alignment, Data, Layout, Record, FIRST_INO};

use crate::entry::Entry;
use crate::policy::Policy;
use crate::spec::ImageSpec;
use layout::Options;

/// Lays one archive's entries out with the policy's alignment mode.
pub fn archive<'a>(entries: &'a [Entry], policy: &Policy) -> Layout<'a> {
    archive::plan(
        entries,
        &Options {
            policy: *policy,
            hints: true,
        },
    )
}

/// Plans every segment of an image.
pub fn image(spec: &ImageSpec) -> ImageLayout<'_> {
    image::plan(spec)
}
