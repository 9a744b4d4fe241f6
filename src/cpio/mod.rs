//! The newc (070701) and newc-with-checksum (070702) cpio format.
//!
//! `header` encodes and decodes the 110-byte header (and the data checksum
//! of 070702); `reader` finds the entries of an archive by the kernel
//! unpacker's rules. Writing a planned layout is [`crate::write`]'s.

pub mod header;
pub mod reader;

pub use header::{checksum, Header, HEADER_LEN, TRAILER_NAME};
