//! The architecture of an image: the ELF machine of its programs, libraries
//! and kernel modules, read from each file's first bytes.

use super::Image;
use crate::arch::Census;
use crate::error::Result;

/// How many ELF files of each architecture `image` holds (compressed
/// modules, `.ko.xz` and the like, are not opened).
pub fn census(image: &Image) -> Result<Census> {
    let mut c = Census::default();
    image.for_each_data(|seg, i, data| {
        let mut head = [0u8; 20];
        let mut got = 0;
        while got < head.len() {
            match data.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(crate::error::Error::io(&image.name, e)),
            }
        }
        let entry = image
            .segments
            .iter()
            .find(|s| s.index == seg)
            .and_then(|s| s.entries.get(i));
        if let Some(e) = entry {
            c.add(e.path(), &head[..got]);
        }
        Ok(())
    })?;
    Ok(c)
}
