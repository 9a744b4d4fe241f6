#![allow(dead_code)]
//! Hand-made newc archives, including broken ones, for the inspect, verify and
//! extract tests. Include with `#[path = "support/craft.rs"] mod craft;`.
//!
//! Every field can be set to a value no honest writer would use: a namesize that does
//! not match the name, a name without NUL, a filesize past the end, a `0x` in a field.

pub const S_IFREG: u32 = 0o100000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFLNK: u32 = 0o120000;
pub const S_IFCHR: u32 = 0o020000;
pub const S_IFIFO: u32 = 0o010000;

/// One entry to write.
#[derive(Clone, Debug)]
pub struct E {
    pub name: Vec<u8>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub mtime: u32,
    pub ino: u32,
    pub data: Vec<u8>,
    /// `070702` with the right checksum (unless `check` overrides it).
    pub crc: bool,
    pub check: Option<u32>,
    /// Overrides namesize (the name field is still name + NUL + `pad` NULs).
    pub namesize: Option<u32>,
    /// Extra NULs after the name's NUL, counted in namesize.
    pub pad: usize,
    /// Leave out the name's NUL.
    pub no_nul: bool,
    /// Overrides filesize (the data written is still `data`).
    pub filesize: Option<u32>,
    pub rdev: (u32, u32),
}

pub fn e(name: &str, mode: u32, data: &[u8]) -> E {
    E {
        name: name.as_bytes().to_vec(),
        mode,
        uid: 0,
        gid: 0,
        nlink: if mode & 0o170000 == S_IFDIR { 2 } else { 1 },
        mtime: 1_700_000_000,
        ino: 0,
        data: data.to_vec(),
        crc: false,
        check: None,
        namesize: None,
        pad: 0,
        no_nul: false,
        filesize: None,
        rdev: (0, 0),
    }
}

pub fn file(name: &str, data: &[u8]) -> E {
    e(name, S_IFREG | 0o644, data)
}

pub fn dir(name: &str) -> E {
    e(name, S_IFDIR | 0o755, b"")
}

pub fn symlink(name: &str, target: &str) -> E {
    e(name, S_IFLNK | 0o777, target.as_bytes())
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// An archive under construction; inodes are numbered from 100 unless set.
pub struct Craft {
    pub buf: Vec<u8>,
    next_ino: u32,
}

impl Default for Craft {
    fn default() -> Self {
        Self::new()
    }
}

impl Craft {
    pub fn new() -> Craft {
        Craft {
            buf: Vec::new(),
            next_ino: 100,
        }
    }

    pub fn add(mut self, e: E) -> Craft {
        let ino = if e.ino != 0 {
            e.ino
        } else {
            self.next_ino += 1;
            self.next_ino
        };
        let name_len = e.name.len() + usize::from(!e.no_nul) + e.pad;
        let namesize = e.namesize.unwrap_or(name_len as u32);
        let sum = e.data.iter().fold(0u32, |s, &b| s.wrapping_add(b as u32));
        let fields = [
            ino,
            e.mode,
            e.uid,
            e.gid,
            e.nlink,
            e.mtime,
            e.filesize.unwrap_or(e.data.len() as u32),
            0,
            0,
            e.rdev.0,
            e.rdev.1,
            namesize,
            if e.crc { e.check.unwrap_or(sum) } else { 0 },
        ];
        self.buf
            .extend_from_slice(if e.crc { b"070702" } else { b"070701" });
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08X}").as_bytes());
        }
        self.buf.extend_from_slice(&e.name);
        if !e.no_nul {
            self.buf.push(0);
        }
        self.buf.resize(self.buf.len() + e.pad, 0);
        pad4(&mut self.buf);
        self.buf.extend_from_slice(&e.data);
        pad4(&mut self.buf);
        self
    }

    /// Appends raw bytes.
    pub fn raw(mut self, bytes: &[u8]) -> Craft {
        self.buf.extend_from_slice(bytes);
        self
    }

    /// Appends the trailer and pads to 512.
    pub fn trailer(mut self) -> Craft {
        let mut t = e("TRAILER!!!", 0, b"");
        t.ino = 0;
        t.nlink = 1;
        t.mtime = 0;
        let save = self.next_ino;
        self = self.add(E { ino: 0, ..t });
        // The trailer's ino field must be 0: rewrite it.
        let start = self.buf.len() - 124;
        self.buf[start + 6..start + 14].copy_from_slice(b"00000000");
        self.next_ino = save;
        self.buf.resize(self.buf.len().next_multiple_of(512), 0);
        self
    }

    pub fn bytes(self) -> Vec<u8> {
        self.buf
    }
}
