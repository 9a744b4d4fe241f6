//! [`SmallBytes`]: an immutable byte string that keeps short values inside
//! itself.
//!
//! An image or a manifest holds a path (and a symlink target) per entry,
//! most of them short; as `Vec<u8>` each is 24 bytes plus an allocation of
//! at least 32. A `SmallBytes` is the same 24 bytes with up to
//! [`INLINE`] bytes inside it and no allocation, and a longer value in an
//! allocation of exactly its length (no spare capacity).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// The longest value kept inside: what fits beside the tag and a length
/// byte in 24 bytes.
pub const INLINE: usize = 22;

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

/// An immutable byte string, compared, ordered and hashed as its bytes.
#[derive(Clone)]
pub struct SmallBytes(Repr);

impl SmallBytes {
    pub const fn new() -> SmallBytes {
        SmallBytes(Repr::Inline {
            len: 0,
            bytes: [0; INLINE],
        })
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..*len as usize],
            Repr::Heap(b) => b,
        }
    }

    /// The bytes as a vector (an allocation for a short value).
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Inline { len, bytes } => bytes[..len as usize].to_vec(),
            Repr::Heap(b) => b.into_vec(),
        }
    }
}

impl Default for SmallBytes {
    fn default() -> Self {
        SmallBytes::new()
    }
}

impl From<&[u8]> for SmallBytes {
    fn from(b: &[u8]) -> Self {
        if b.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..b.len()].copy_from_slice(b);
            SmallBytes(Repr::Inline {
                len: b.len() as u8,
                bytes,
            })
        } else {
            SmallBytes(Repr::Heap(b.into()))
        }
    }
}

impl From<Vec<u8>> for SmallBytes {
    /// Takes the vector's allocation for a long value (shrunk to its
    /// length), none for a short one.
    fn from(v: Vec<u8>) -> Self {
        if v.len() <= INLINE {
            SmallBytes::from(v.as_slice())
        } else {
            SmallBytes(Repr::Heap(v.into_boxed_slice()))
        }
    }
}

impl<const N: usize> From<&[u8; N]> for SmallBytes {
    fn from(b: &[u8; N]) -> Self {
        SmallBytes::from(&b[..])
    }
}

impl Deref for SmallBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for SmallBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for SmallBytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for SmallBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SmallBytes {}

impl PartialEq<[u8]> for SmallBytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<u8>> for SmallBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<const N: usize> PartialEq<[u8; N]> for SmallBytes {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.as_slice() == other
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for SmallBytes {
    fn eq(&self, other: &&[u8; N]) -> bool {
        self.as_slice() == *other
    }
}

impl PartialOrd for SmallBytes {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmallBytes {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Hash for SmallBytes {
    /// As the bytes hash, so that a map keyed by `SmallBytes` can be
    /// looked up with a `&[u8]`.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl fmt::Debug for SmallBytes {
    /// As a `Vec<u8>` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of<T: Hash + ?Sized>(t: &T) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    #[test]
    fn it_is_as_small_as_a_vec_and_so_is_an_option_of_it() {
        assert_eq!(std::mem::size_of::<SmallBytes>(), 24);
        assert_eq!(std::mem::size_of::<Option<SmallBytes>>(), 24);
    }

    #[test]
    fn every_length_keeps_its_bytes() {
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 100, 4096] {
            let v: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let a = SmallBytes::from(v.clone());
            let b = SmallBytes::from(v.as_slice());
            assert_eq!(a.as_slice(), v.as_slice(), "{len}");
            assert_eq!(a, b);
            assert_eq!(a.len(), len);
            assert_eq!(hash_of(&a), hash_of(v.as_slice()));
            assert_eq!(a.clone().into_vec(), v);
            assert_eq!(matches!(a.0, Repr::Inline { .. }), len <= INLINE);
        }
    }

    #[test]
    fn order_is_the_order_of_the_bytes() {
        let words: [&[u8]; 6] = [
            b"",
            b"a",
            b"a/b",
            b"ab",
            b"a-very-long-name-beyond-the-inline-size",
            b"a-very-long-name-beyond-the-inline-size/x",
        ];
        for x in words {
            for y in words {
                assert_eq!(SmallBytes::from(x).cmp(&SmallBytes::from(y)), x.cmp(y));
            }
        }
    }
}
