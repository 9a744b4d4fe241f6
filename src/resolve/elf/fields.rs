//! Reading ELF fields: one class (ELF32, ELF64) and byte order, the
//! readers every ELF parser here uses (shared objects and kernel modules).

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    Elf32,
    Elf64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Endian {
    Little,
    Big,
}

/// Field readers for one class and byte order. Offsets must be in range
/// (callers check lengths first).
#[derive(Clone, Copy, Debug)]
pub struct Fields {
    pub class: Class,
    pub endian: Endian,
}

impl Fields {
    /// The class and byte order of an ELF identification (`e_ident[4..6]`).
    pub fn from_ident(class: u8, data: u8) -> Option<Fields> {
        let class = match class {
            1 => Class::Elf32,
            2 => Class::Elf64,
            _ => return None,
        };
        let endian = match data {
            1 => Endian::Little,
            2 => Endian::Big,
            _ => return None,
        };
        Some(Fields { class, endian })
    }

    pub fn u16(self, b: &[u8], at: usize) -> u16 {
        let a = [b[at], b[at + 1]];
        match self.endian {
            Endian::Little => u16::from_le_bytes(a),
            Endian::Big => u16::from_be_bytes(a),
        }
    }

    pub fn u32(self, b: &[u8], at: usize) -> u32 {
        let a = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        match self.endian {
            Endian::Little => u32::from_le_bytes(a),
            Endian::Big => u32::from_be_bytes(a),
        }
    }

    pub fn u64(self, b: &[u8], at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        match self.endian {
            Endian::Little => u64::from_le_bytes(a),
            Endian::Big => u64::from_be_bytes(a),
        }
    }

    /// A word: 4 bytes in ELF32, 8 in ELF64.
    pub fn word(self, b: &[u8], at: usize) -> u64 {
        match self.class {
            Class::Elf32 => self.u32(b, at) as u64,
            Class::Elf64 => self.u64(b, at),
        }
    }

    pub fn word_size(self) -> usize {
        match self.class {
            Class::Elf32 => 4,
            Class::Elf64 => 8,
        }
    }

    pub fn is64(self) -> bool {
        self.class == Class::Elf64
    }
}
