//! The PE side of a unified kernel image: the section table of an EFI
//! program read (with the `object` crate, which checks every offset it
//! follows), and new sections appended to a stub as systemd's stub and ukify
//! lay them out: each after the last one in memory and in the file, aligned
//! to the image's section and file alignment, with SizeOfImage and the
//! checksum made right.

use object::pe;
use object::pe::ImageNtHeaders64;
use object::read::pe::{ImageNtHeaders, ImageOptionalHeader};

/// How much of a file's start is read to find its headers: the section table
/// of an EFI program sits in its first few KiB.
pub const HEADERS_READ: usize = 64 << 10;

/// One section of a PE file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Section {
    pub name: String,
    /// Where it is mapped, relative to the image base.
    pub virtual_address: u32,
    /// Its size in memory: the size of what it holds.
    pub virtual_size: u32,
    /// Where its bytes are in the file.
    pub offset: u32,
    /// How many bytes of the file it holds (the smaller of its virtual size and
    /// its raw size, as the loader reads it).
    pub size: u32,
}

/// Where the fields the assembly rewrites are, and the alignments it keeps.
struct Headers {
    sections: Vec<Section>,
    /// The file offset of the file header's NumberOfSections.
    number_of_sections_at: usize,
    /// The file offset of the optional header.
    optional_at: usize,
    /// The file offset of the file header's PointerToSymbolTable (and, after
    /// it, NumberOfSymbols).
    symbols_at: usize,
    /// Where the sections' raw data ends in the file.
    raw_end: u64,
    /// The file offset just after the last section header.
    table_end: usize,
    section_alignment: u32,
    file_alignment: u32,
    size_of_headers: u32,
    /// The certificate table's size (the data directory's): non-zero for a
    /// signed program.
    certificates: u32,
    /// The debug directory's size: its entries hold file offsets.
    debug: u32,
}

// Offsets of fields inside the PE32+ optional header.
const SIZE_OF_INITIALIZED_DATA: usize = 8;
const SIZE_OF_IMAGE: usize = 56;
const SIZE_OF_HEADERS: usize = 60;
const CHECKSUM: usize = 64;
const SECTION_HEADER: usize = 40;
/// IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ, what ukify gives the
/// sections it adds.
const DATA_READ: u32 = 0x4000_0040;
/// The largest FileAlignment the PE format allows.
const MAX_FILE_ALIGNMENT: u32 = 64 << 10;

fn headers(head: &[u8]) -> Result<Headers, String> {
    let dos = pe::ImageDosHeader::parse(head).map_err(|e| format!("not a PE file ({e})"))?;
    let nt_at = dos.nt_headers_offset() as usize;
    let mut offset = nt_at as u64;
    let (nt, directories) = ImageNtHeaders64::parse(head, &mut offset)
        .map_err(|e| format!("not a 64-bit EFI program ({e})"))?;
    let certificates = directories
        .get(pe::IMAGE_DIRECTORY_ENTRY_SECURITY)
        .map_or(0, |d| d.size.get(object::LittleEndian));
    let debug = directories
        .get(pe::IMAGE_DIRECTORY_ENTRY_DEBUG)
        .map_or(0, |d| d.size.get(object::LittleEndian));
    let table = nt
        .sections(head, offset)
        .map_err(|e| format!("a broken section table ({e})"))?;
    let sections = table
        .iter()
        .map(|s| {
            let raw = s.raw_name();
            let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            let (at, size) = s.pe_file_range();
            Section {
                name: String::from_utf8_lossy(&raw[..end]).into_owned(),
                virtual_address: s.virtual_address.get(object::LittleEndian),
                virtual_size: s.virtual_size.get(object::LittleEndian),
                offset: at,
                size,
            }
        })
        .collect::<Vec<_>>();
    let raw_end = table
        .iter()
        .map(|s| {
            u64::from(s.pointer_to_raw_data.get(object::LittleEndian))
                + u64::from(s.size_of_raw_data.get(object::LittleEndian))
        })
        .max()
        .unwrap_or(0);
    let opt = nt.optional_header();
    Ok(Headers {
        table_end: offset as usize + sections.len() * SECTION_HEADER,
        sections,
        number_of_sections_at: nt_at + 6,
        optional_at: nt_at + 24,
        symbols_at: nt_at + 12,
        raw_end,
        section_alignment: opt.section_alignment(),
        file_alignment: opt.file_alignment(),
        size_of_headers: opt.size_of_headers(),
        certificates,
        debug,
    })
}

/// The machine type (IMAGE_FILE_MACHINE_*) of a PE file whose first bytes
/// (its headers) are `head`; None for anything else.
pub fn machine(head: &[u8]) -> Option<u16> {
    let dos = pe::ImageDosHeader::parse(head).ok()?;
    let at = dos.nt_headers_offset() as usize;
    if head.get(at..at + 4)? != b"PE\0\0" {
        return None;
    }
    let m = head.get(at + 4..at + 6)?;
    Some(u16::from_le_bytes([m[0], m[1]]))
}

/// The bytes of section `name` of the PE file `pe` (as many as it maps);
/// None when it has no such section, or its data is not in the file.
pub fn section_data<'a>(pe: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let s = sections(&pe[..pe.len().min(HEADERS_READ)])
        .ok()?
        .into_iter()
        .find(|s| s.name == name)?;
    let at = s.offset as usize;
    pe.get(at..at.checked_add(s.size as usize)?)
}

/// Renames section `from` of the PE file `pe` to `to` (1 to 8 bytes) in its
/// section table; false when it has no such section. The data stays where
/// it is; [`append_sections`] sets the checksum after.
pub fn rename_section(pe: &mut [u8], from: &str, to: &str) -> Result<bool, String> {
    if to.is_empty() || to.len() > 8 {
        return Err(format!("`{to}` is not a PE section name (1 to 8 bytes)"));
    }
    let h = headers(&pe[..pe.len().min(HEADERS_READ)])?;
    let first = h.table_end - h.sections.len() * SECTION_HEADER;
    let Some(i) = h.sections.iter().position(|s| s.name == from) else {
        return Ok(false);
    };
    if h.sections.iter().any(|s| s.name == to) {
        return Err(format!("it already has a `{to}` section"));
    }
    let at = first + i * SECTION_HEADER;
    let mut name = [0u8; 8];
    name[..to.len()].copy_from_slice(to.as_bytes());
    pe.get_mut(at..at + 8)
        .ok_or("its section table is past its end")?
        .copy_from_slice(&name);
    Ok(true)
}

/// The sections of the PE file whose first bytes (at least its headers;
/// [`HEADERS_READ`] is enough for an EFI program) are `head`.
pub fn sections(head: &[u8]) -> Result<Vec<Section>, String> {
    headers(head).map(|h| h.sections)
}

fn align_up(n: u64, to: u32) -> u64 {
    let to = u64::from(to.max(1));
    n.div_ceil(to) * to
}

fn put_u16(out: &mut [u8], at: usize, v: u16) {
    out[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(out: &mut [u8], at: usize, v: u32) {
    out[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(data[at..at + 4].try_into().expect("four bytes"))
}

/// The PE image checksum: the 16-bit one's complement sum of the file with its
/// checksum field taken as zero, plus the file's length.
pub fn image_checksum(data: &[u8], field_at: usize) -> u32 {
    let mut sum: u64 = 0;
    for (i, pair) in data.chunks(2).enumerate() {
        let at = i * 2;
        if at >= field_at && at < field_at + 4 {
            continue;
        }
        let word = u64::from(pair[0]) | pair.get(1).map_or(0, |&b| u64::from(b) << 8);
        sum += word;
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum = (sum & 0xffff) + (sum >> 16);
    (sum as u32).wrapping_add(data.len() as u32)
}

/// `pe` with its headers grown by `need` bytes (rounded up to the file
/// alignment) so that more section headers fit: every section's data moves
/// that far on in the file (its place in memory stays), and SizeOfHeaders
/// grows. Refused when the headers would reach the first section in memory,
/// or when a debug directory (which holds file offsets) is there.
fn grow_headers(pe: &[u8], h: &Headers, first_data: usize, need: usize) -> Result<Vec<u8>, String> {
    let no_room = |why: &str| {
        format!(
            "no room for more section headers (the headers end at byte {}, the first \
             section at {first_data}; {why})",
            h.table_end
        )
    };
    let shift = align_up(need as u64, h.file_alignment);
    let size_of_headers = u64::from(h.size_of_headers) + shift;
    let lowest_va = h
        .sections
        .iter()
        .map(|s| u64::from(s.virtual_address))
        .min()
        .unwrap_or(u64::MAX);
    if align_up(size_of_headers, h.section_alignment) > lowest_va {
        return Err(no_room(
            "growing them would reach the first section in memory",
        ));
    }
    if h.debug != 0 {
        return Err(no_room(
            "its debug directory holds file offsets, which are not moved",
        ));
    }
    if first_data > pe.len() {
        return Err(format!(
            "it ends at byte {} inside its own headers",
            pe.len()
        ));
    }
    if first_data < h.table_end {
        return Err(no_room("its sections' data starts inside its headers"));
    }
    let shift32 = shift as u32;
    let mut out = Vec::with_capacity(pe.len() + shift as usize);
    out.extend_from_slice(&pe[..first_data]);
    out.resize(first_data + shift as usize, 0);
    out.extend_from_slice(&pe[first_data..]);
    let table = h.table_end - h.sections.len() * SECTION_HEADER;
    for i in 0..h.sections.len() {
        // PointerToRawData, PointerToRelocations, PointerToLinenumbers.
        for field in [20, 24, 28] {
            let at = table + i * SECTION_HEADER + field;
            let v = get_u32(&out, at);
            if v != 0 {
                put_u32(&mut out, at, v.checked_add(shift32).ok_or("past 4 GiB")?);
            }
        }
    }
    let symbols = get_u32(&out, h.symbols_at);
    if symbols != 0 {
        put_u32(&mut out, h.symbols_at, symbols.saturating_add(shift32));
    }
    put_u32(
        &mut out,
        h.optional_at + SIZE_OF_HEADERS,
        u32::try_from(size_of_headers).map_err(|_| "past 4 GiB".to_string())?,
    );
    Ok(out)
}

/// The stub with `add` appended as sections, in that order; the headers grow
/// (the sections' data moving on in the file) when the new section headers
/// do not fit before the first section's data. Errors say what is wrong
/// with the stub or the sections.
pub fn append_sections(stub: &[u8], add: &[(&str, &[u8])]) -> Result<Vec<u8>, String> {
    let h = headers(&stub[..stub.len().min(HEADERS_READ)])?;
    for a in [h.section_alignment, h.file_alignment] {
        if !a.is_power_of_two() || a < 512 {
            return Err(format!(
                "an alignment of {a} bytes, which is not a valid PE alignment"
            ));
        }
    }
    // The PE format bounds the file alignment (each appended section is
    // padded to it in memory here); a larger one is a damaged header.
    if h.file_alignment > MAX_FILE_ALIGNMENT {
        return Err(format!(
            "a file alignment of {} bytes, past the PE format's 64 KiB",
            h.file_alignment
        ));
    }
    if h.raw_end > stub.len() as u64 {
        let last = h
            .sections
            .iter()
            .max_by_key(|s| u64::from(s.offset) + u64::from(s.size))
            .map_or("?", |s| s.name.as_str());
        return Err(format!(
            "it is cut short: its sections' data runs to byte {} (the `{last}` section), \
             past its end at byte {}",
            h.raw_end,
            stub.len()
        ));
    }
    if h.certificates != 0 {
        return Err(
            "it is signed (it has a certificate table): the signature would not cover the \
             sections added, and would go stale"
                .to_string(),
        );
    }
    for (name, _) in add {
        if name.is_empty() || name.len() > 8 {
            return Err(format!("`{name}` is not a PE section name (1 to 8 bytes)"));
        }
        if h.sections.iter().any(|s| s.name == *name) {
            return Err(format!(
                "it already has a `{name}` section: it is a unified kernel image, not a stub"
            ));
        }
    }
    // The new headers go after the last one, before the first section's data.
    let first_data = h
        .sections
        .iter()
        .filter(|s| s.offset > 0)
        .map(|s| s.offset as usize)
        .min()
        .unwrap_or(usize::MAX)
        .min(h.size_of_headers as usize);
    let table_end = h.table_end + add.len() * SECTION_HEADER;
    if h.table_end > stub.len() || u64::from(h.size_of_headers) > stub.len() as u64 {
        return Err(format!(
            "it ends at byte {} inside its own headers (SizeOfHeaders is {})",
            stub.len(),
            h.size_of_headers
        ));
    }
    if table_end > first_data {
        let grown = grow_headers(stub, &h, first_data, table_end - first_data).map_err(|e| {
            e.replace(
                "more section headers",
                &format!("{} more section headers", add.len()),
            )
        })?;
        return append_sections(&grown, add);
    }
    let mut va = h
        .sections
        .iter()
        .map(|s| u64::from(s.virtual_address) + u64::from(s.virtual_size.max(1)))
        .max()
        .unwrap_or(u64::from(h.size_of_headers));
    va = align_up(va, h.section_alignment);
    let mut out = stub.to_vec();
    // A COFF symbol table after the sections (the stub's, for debuggers; no
    // loader reads it) would sit between them and the new ones, a gap that
    // Authenticode signing warns about: it goes, as objcopy drops it.
    let symbols = get_u32(&out, h.symbols_at);
    if symbols != 0
        && u64::from(symbols) >= h.raw_end
        && h.raw_end <= out.len() as u64
        && h.raw_end >= table_end as u64
        && h.raw_end >= u64::from(h.size_of_headers)
    {
        out.truncate(h.raw_end as usize);
        put_u32(&mut out, h.symbols_at, 0);
        put_u32(&mut out, h.symbols_at + 4, 0);
    }
    out.resize(align_up(out.len() as u64, h.file_alignment) as usize, 0);
    let mut added_raw: u64 = 0;
    for (i, (name, data)) in add.iter().enumerate() {
        let offset = out.len() as u64;
        let raw = align_up(data.len() as u64, h.file_alignment);
        let end = offset + raw;
        let va_end = va + data.len() as u64;
        if end > u64::from(u32::MAX) || va_end > u64::from(u32::MAX) {
            return Err(format!(
                "the image would pass 4 GiB with the `{name}` section ({} bytes)",
                data.len()
            ));
        }
        let mut header = [0u8; SECTION_HEADER];
        header[..name.len()].copy_from_slice(name.as_bytes());
        put_u32(&mut header, 8, data.len() as u32);
        put_u32(&mut header, 12, va as u32);
        put_u32(&mut header, 16, raw as u32);
        put_u32(&mut header, 20, offset as u32);
        put_u32(&mut header, 36, DATA_READ);
        let at = h.table_end + i * SECTION_HEADER;
        out[at..at + SECTION_HEADER].copy_from_slice(&header);
        out.extend_from_slice(data);
        out.resize(end as usize, 0);
        added_raw += raw;
        va = align_up(va_end.max(va + 1), h.section_alignment);
    }
    let count = h.sections.len() + add.len();
    let count = u16::try_from(count).map_err(|_| format!("{count} sections are too many"))?;
    put_u16(&mut out, h.number_of_sections_at, count);
    let opt = h.optional_at;
    let image_size = u32::try_from(va).map_err(|_| "the image would pass 4 GiB".to_string())?;
    put_u32(&mut out, opt + SIZE_OF_IMAGE, image_size);
    let initialized = u64::from(get_u32(&out, opt + SIZE_OF_INITIALIZED_DATA)) + added_raw;
    put_u32(
        &mut out,
        opt + SIZE_OF_INITIALIZED_DATA,
        u32::try_from(initialized).unwrap_or(u32::MAX),
    );
    put_u32(&mut out, opt + CHECKSUM, 0);
    let sum = image_checksum(&out, opt + CHECKSUM);
    put_u32(&mut out, opt + CHECKSUM, sum);
    Ok(out)
}

/// A minimal PE32+ file for tests: DOS header, NT headers, one `.text` section
/// whose data starts at `header_room`.
#[cfg(test)]
pub(crate) fn tiny_pe(header_room: u32) -> Vec<u8> {
    let mut f = vec![0u8; 0x400];
    f[0] = b'M';
    f[1] = b'Z';
    put_u32(&mut f, 0x3c, 0x80);
    f[0x80..0x84].copy_from_slice(b"PE\0\0");
    put_u16(&mut f, 0x84, 0x8664);
    put_u16(&mut f, 0x86, 1);
    put_u16(&mut f, 0x94, 240);
    put_u16(&mut f, 0x96, 0x22);
    let opt = 0x98;
    put_u16(&mut f, opt, 0x20b);
    put_u32(&mut f, opt + 32, 0x1000);
    put_u32(&mut f, opt + 36, 0x200);
    put_u32(&mut f, opt + 56, 0x2000);
    put_u32(&mut f, opt + 60, header_room);
    put_u16(&mut f, opt + 68, 10);
    put_u32(&mut f, opt + 108, 16);
    let sec = opt + 240;
    f[sec..sec + 5].copy_from_slice(b".text");
    put_u32(&mut f, sec + 8, 0x10);
    put_u32(&mut f, sec + 12, 0x1000);
    put_u32(&mut f, sec + 16, 0x200);
    put_u32(&mut f, sec + 20, header_room);
    f.resize(header_room as usize + 0x200, 0xcc);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_appended_aligned_and_read_back() {
        let stub = tiny_pe(0x400);
        let uki = append_sections(
            &stub,
            &[
                (".cmdline", b"root=/dev/vda quiet"),
                (".initrd", &[7u8; 5000]),
            ],
        )
        .unwrap();
        let s = sections(&uki).unwrap();
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [".text", ".cmdline", ".initrd"]);
        assert_eq!(s[1].virtual_address, 0x2000);
        assert_eq!(s[2].virtual_address, 0x3000);
        assert_eq!(s[1].offset % 0x200, 0);
        assert_eq!(s[2].offset % 0x200, 0);
        let at = s[1].offset as usize;
        assert_eq!(&uki[at..at + 19], b"root=/dev/vda quiet");
        assert_eq!(s[2].size, 5000);
        assert_eq!(uki[s[2].offset as usize + 4999], 7);
        // SizeOfImage covers the last section; the checksum is the file's.
        assert_eq!(get_u32(&uki, 0x98 + SIZE_OF_IMAGE), 0x5000);
        let sum = get_u32(&uki, 0x98 + CHECKSUM);
        assert_eq!(sum, image_checksum(&uki, 0x98 + CHECKSUM));
        assert_ne!(sum, 0);
    }

    #[test]
    fn a_symbol_table_after_the_sections_is_dropped() {
        let mut stub = tiny_pe(0x400);
        let end = stub.len();
        stub.extend_from_slice(&[0xab; 100]);
        put_u32(&mut stub, 0x8c, end as u32);
        put_u32(&mut stub, 0x90, 5);
        let uki = append_sections(&stub, &[(".linux", b"kernel")]).unwrap();
        assert_eq!(get_u32(&uki, 0x8c), 0);
        assert_eq!(get_u32(&uki, 0x90), 0);
        let s = sections(&uki).unwrap();
        assert_eq!(
            s[1].offset as usize, end,
            "the new section follows the last one"
        );
        assert!(!uki.contains(&0xab));
    }

    #[test]
    fn a_stub_without_room_or_with_the_sections_is_refused() {
        // The section table ends at 0x1b0: room for 2 more headers before 0x200;
        // 3 grow the headers to 0x400, moving .text's data there (its address
        // stays); 92 would reach .text in memory at 0x1000.
        let stub = tiny_pe(0x200);
        let two = append_sections(&stub, &[(".a", b"x"), (".b", b"y")]).unwrap();
        assert_eq!(sections(&two).unwrap()[0].offset, 0x200);
        let names = ["n0", "n1", "n2"];
        let three: Vec<(&str, &[u8])> = names.iter().map(|n| (*n, &b"z"[..])).collect();
        let uki = append_sections(&stub, &three).unwrap();
        let s = sections(&uki).unwrap();
        assert_eq!((s[0].offset, s[0].virtual_address), (0x400, 0x1000));
        assert_eq!(&uki[0x400..0x410], &stub[0x200..0x210]);
        assert_eq!(get_u32(&uki, 0x98 + SIZE_OF_HEADERS), 0x400);
        assert_eq!(s.len(), 4);
        assert_eq!(&uki[s[3].offset as usize..][..1], b"z");
        let sum = get_u32(&uki, 0x98 + CHECKSUM);
        assert_eq!(sum, image_checksum(&uki, 0x98 + CHECKSUM));
        let names: Vec<String> = (0..92).map(|i| format!("s{i}")).collect();
        let many: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
        let e = append_sections(&stub, &many).unwrap_err();
        assert!(
            e.contains("no room for 92 more section headers")
                && e.contains("reach the first section in memory"),
            "{e}"
        );
        // A debug directory's file offsets would go stale: no growing.
        let mut debug = tiny_pe(0x200);
        put_u32(&mut debug, 0x98 + 112 + 6 * 8, 0x1000);
        put_u32(&mut debug, 0x98 + 112 + 6 * 8 + 4, 28);
        let e = append_sections(&debug, &three).unwrap_err();
        assert!(e.contains("debug directory"), "{e}");
        let uki = append_sections(&stub, &[(".linux", b"kernel")]).unwrap();
        let e = append_sections(&uki, &[(".linux", b"again")]).unwrap_err();
        assert!(e.contains("already has a `.linux` section"), "{e}");
        let e = append_sections(&stub, &[(".toolongname", b"x")]).unwrap_err();
        assert!(e.contains("not a PE section name"), "{e}");
    }

    /// A stub cut short (its sections' data past its end) and a signed one (a
    /// certificate table) are refused before anything is appended.
    #[test]
    fn a_cut_or_signed_stub_is_refused() {
        let stub = tiny_pe(0x400);
        let e = append_sections(&stub[..0x500], &[(".linux", b"k")]).unwrap_err();
        assert!(
            e.contains("cut short: its sections' data runs to byte 1536 (the `.text` section), past its end at byte 1280"),
            "{e}"
        );
        let mut signed = tiny_pe(0x400);
        let dir = 0x98 + 112 + 4 * 8;
        put_u32(&mut signed, dir, 0x600);
        put_u32(&mut signed, dir + 4, 0x100);
        signed.resize(0x700, 0);
        let e = append_sections(&signed, &[(".linux", b"k")]).unwrap_err();
        assert!(
            e.contains("it is signed (it has a certificate table)"),
            "{e}"
        );
    }

    #[test]
    fn a_section_is_read_and_renamed() {
        let mut pe = append_sections(&tiny_pe(0x400), &[(".sbat", b"sbat,1,x\n")]).unwrap();
        assert_eq!(section_data(&pe, ".sbat"), Some(&b"sbat,1,x\n"[..]));
        assert_eq!(section_data(&pe, ".none"), None);
        assert!(rename_section(&mut pe, ".sbat", ".sbat-0").unwrap());
        assert!(!rename_section(&mut pe, ".sbat", ".sbat-0").unwrap());
        assert_eq!(section_data(&pe, ".sbat-0"), Some(&b"sbat,1,x\n"[..]));
        assert!(rename_section(&mut pe, ".text", ".sbat-0").is_err());
        assert!(rename_section(&mut pe, ".text", "").is_err());
    }

    #[test]
    fn hostile_headers_are_errors_not_panics() {
        assert!(sections(b"").is_err());
        assert!(sections(b"MZ").is_err());
        let mut f = tiny_pe(0x400);
        // NT headers past the end, a section count past the data.
        put_u32(&mut f, 0x3c, 0xffff_fff0);
        assert!(sections(&f).is_err());
        let mut f = tiny_pe(0x400);
        put_u16(&mut f, 0x86, 0xffff);
        assert!(sections(&f).is_err());
        assert!(append_sections(&f, &[(".x", b"y")]).is_err());
        // Headers said to run past the file's end, no section data to show
        // it cut short: the new section headers would land past the end.
        let mut f = tiny_pe(0x400);
        put_u32(&mut f, 0x98 + 60, 0x1000);
        put_u32(&mut f, 0x98 + 240 + 20, 0);
        put_u32(&mut f, 0x98 + 240 + 16, 0);
        f.truncate(0x200);
        let e = append_sections(&f, &[(".x", b"y")]).unwrap_err();
        assert!(
            e.contains("ends at byte 512 inside its own headers (SizeOfHeaders is 4096)"),
            "{e}"
        );
        // A file alignment of 1 GiB (a power of two, so "valid" but for the
        // format's 64 KiB bound) would pad each section to 1 GiB in memory.
        let mut f = tiny_pe(0x400);
        put_u32(&mut f, 0x98 + 32, 1 << 30);
        put_u32(&mut f, 0x98 + 36, 1 << 30);
        let e = append_sections(&f, &[(".x", b"y")]).unwrap_err();
        assert!(e.contains("file alignment of 1073741824 bytes"), "{e}");
        for cut in [0, 1, 0x40, 0x84, 0x98, 0x190] {
            let mut g = tiny_pe(0x400);
            g.truncate(cut);
            assert!(sections(&g).is_err());
            assert!(append_sections(&g, &[(".x", b"y")]).is_err());
        }
    }

    #[test]
    fn checksum_matches_the_known_algorithm() {
        // Words 0x0201 + 0x0403 (+ a trailing 0x05), plus the length.
        assert_eq!(
            image_checksum(&[1, 2, 3, 4, 5], 100),
            0x0201 + 0x0403 + 5 + 5
        );
        // The field is skipped.
        assert_eq!(
            image_checksum(&[1, 2, 0xff, 0xff, 0xff, 0xff], 2),
            0x0201 + 6
        );
    }
}
