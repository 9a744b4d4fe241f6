//! The newc (070701) and newc-with-checksum (070702) cpio format.
//!
//! `header` encodes and decodes the 110-byte header; `writer` turns a
//! planned [`crate::plan::Layout`] into archive bytes; `reader` finds the
//! entries of an archive by the kernel unpacker's rules.

pub mod header;
pub mod reader;
pub mod writer;

pub use header::{Header, HEADER_LEN, TRAILER_NAME};
