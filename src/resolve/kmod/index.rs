//! kmod's binary index (`modules.dep.bin`, `modules.alias.bin`, ...): a
//! path-compressed trie of ASCII keys, each key holding values sorted by
//! priority.
//!
//! The writer reproduces depmod's bytes exactly: the same trie shape (it is
//! canonical for a key set), the same post-order layout, the same order of
//! values inside a node. The searches reproduce libkmod's, including the
//! order in which a wildcard search returns what it found, because modprobe's
//! output order follows it.

use std::fmt;

const MAGIC: u32 = 0xB007_F457;
const VERSION: u32 = 0x0002_0001;
const NODE_PREFIX: u32 = 0x8000_0000;
const NODE_VALUES: u32 = 0x4000_0000;
const NODE_CHILDS: u32 = 0x2000_0000;
const NODE_MASK: u32 = 0x0FFF_FFFF;

/// One value of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    pub priority: u32,
    pub value: Vec<u8>,
}

/// What a wildcard search found: the stored key (a pattern), one of its
/// values and that value's priority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub priority: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexError(pub String);

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for IndexError {}

#[derive(Clone, Debug, Default)]
struct Node {
    prefix: Vec<u8>,
    /// In depmod's list order: by priority, equal priorities newest first.
    values: Vec<Value>,
    /// (character, node), sorted by character.
    children: Vec<(u8, u32)>,
}

impl Node {
    fn child(&self, ch: u8) -> Option<usize> {
        self.children
            .binary_search_by_key(&ch, |c| c.0)
            .ok()
            .map(|i| self.children[i].1 as usize)
    }
}

/// An index: built by inserting keys, or read from a file.
#[derive(Clone, Debug)]
pub struct Index {
    nodes: Vec<Node>,
}

impl Default for Index {
    fn default() -> Self {
        Index::new()
    }
}

/// depmod's `index_add_value`: insert before the first value whose priority
/// is not lower; report whether the same value was there already.
fn add_value(values: &mut Vec<Value>, value: &[u8], priority: u32) -> bool {
    let duplicate = values.iter().any(|v| v.value == value);
    let at = values
        .iter()
        .position(|v| v.priority >= priority)
        .unwrap_or(values.len());
    values.insert(
        at,
        Value {
            priority,
            value: value.to_vec(),
        },
    );
    duplicate
}

fn check_ascii(s: &[u8], what: &str) -> Result<(), IndexError> {
    match s.iter().find(|&&b| b >= 128 || b == 0) {
        Some(b) => Err(IndexError(format!(
            "module index {what} `{}` has the byte 0x{b:02x}: only 7-bit ASCII without NUL is supported",
            s.escape_ascii()
        ))),
        None => Ok(()),
    }
}

impl Index {
    pub fn new() -> Self {
        Index {
            nodes: vec![Node::default()],
        }
    }

    /// True when no key was inserted.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() == 1 && self.nodes[0].values.is_empty()
    }

    /// Adds `value` under `key` (depmod's `index_insert`). Returns whether
    /// the key already held this value (it is added again, as depmod does).
    pub fn insert(&mut self, key: &[u8], value: &[u8], priority: u32) -> Result<bool, IndexError> {
        check_ascii(key, "key")?;
        check_ascii(value, "value")?;
        let mut n = 0usize;
        let mut i = 0usize;
        loop {
            let plen = self.nodes[n].prefix.len();
            let mut j = 0;
            while j < plen {
                let ch = self.nodes[n].prefix[j];
                if key.get(i + j) != Some(&ch) {
                    // Split: the node keeps prefix[..j], a new child at
                    // prefix[j] takes the rest with the values and children.
                    let old = std::mem::take(&mut self.nodes[n]);
                    let child = Node {
                        prefix: old.prefix[j + 1..].to_vec(),
                        values: old.values,
                        children: old.children,
                    };
                    let ci = self.nodes.len() as u32;
                    self.nodes.push(child);
                    self.nodes[n] = Node {
                        prefix: old.prefix[..j].to_vec(),
                        values: Vec::new(),
                        children: vec![(ch, ci)],
                    };
                    break;
                }
                j += 1;
            }
            i += j;
            let Some(&ch) = key.get(i) else {
                return Ok(add_value(&mut self.nodes[n].values, value, priority));
            };
            match self.nodes[n].child(ch) {
                Some(c) => {
                    n = c;
                    i += 1;
                }
                None => {
                    let ci = self.nodes.len() as u32;
                    self.nodes.push(Node {
                        prefix: key[i + 1..].to_vec(),
                        values: vec![Value {
                            priority,
                            value: value.to_vec(),
                        }],
                        children: Vec::new(),
                    });
                    let children = &mut self.nodes[n].children;
                    let at = children.partition_point(|c| c.0 < ch);
                    children.insert(at, (ch, ci));
                    return Ok(false);
                }
            }
        }
    }

    /// The file depmod writes for this index.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.nodes.len() * 16);
        out.extend_from_slice(&MAGIC.to_be_bytes());
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
        let root = self.write_node(0, &mut out);
        out[8..12].copy_from_slice(&root.to_be_bytes());
        out
    }

    fn write_node(&self, n: usize, out: &mut Vec<u8>) -> u32 {
        let node = &self.nodes[n];
        let mut offs = Vec::new();
        if let (Some(first), Some(last)) = (node.children.first(), node.children.last()) {
            let (first, last) = (first.0, last.0);
            let mut k = 0;
            for ch in first..=last {
                if node.children.get(k).is_some_and(|c| c.0 == ch) {
                    offs.push(self.write_node(node.children[k].1 as usize, out));
                    k += 1;
                } else {
                    offs.push(0);
                }
            }
        }
        let mut offset = out.len() as u32;
        if !node.prefix.is_empty() {
            out.extend_from_slice(&node.prefix);
            out.push(0);
            offset |= NODE_PREFIX;
        }
        if let (Some(first), Some(last)) = (node.children.first(), node.children.last()) {
            out.push(first.0);
            out.push(last.0);
            for o in offs {
                out.extend_from_slice(&o.to_be_bytes());
            }
            offset |= NODE_CHILDS;
        }
        if !node.values.is_empty() {
            out.extend_from_slice(&(node.values.len() as u32).to_be_bytes());
            for v in &node.values {
                out.extend_from_slice(&v.priority.to_be_bytes());
                out.extend_from_slice(&v.value);
                out.push(0);
            }
            offset |= NODE_VALUES;
        }
        offset
    }

    /// Reads an index file (any of kmod's `.bin` files).
    pub fn from_bytes(data: &[u8]) -> Result<Index, IndexError> {
        let bad = |what: &str| IndexError(format!("not a kmod index: {what}"));
        let u32_at = |o: usize| -> Result<u32, IndexError> {
            data.get(o..o + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(|| bad("truncated"))
        };
        if u32_at(0)? != MAGIC {
            return Err(bad("wrong magic"));
        }
        if u32_at(4)? >> 16 != VERSION >> 16 {
            return Err(bad("unsupported version"));
        }
        let mut index = Index { nodes: Vec::new() };
        let root = u32_at(8)?;
        // Explicit stack instead of recursion: (offset, parent, character).
        let mut todo: Vec<(u32, Option<(usize, u8)>)> = vec![(root, None)];
        while let Some((off, parent)) = todo.pop() {
            let mut p = (off & NODE_MASK) as usize;
            if p == 0 && parent.is_none() {
                index.nodes.push(Node::default());
                continue;
            }
            let mut node = Node::default();
            if off & NODE_PREFIX != 0 {
                let len = data
                    .get(p..)
                    .and_then(|d| d.iter().position(|&b| b == 0))
                    .ok_or_else(|| bad("unterminated prefix"))?;
                node.prefix = data[p..p + len].to_vec();
                p += len + 1;
            }
            let mut kids = Vec::new();
            if off & NODE_CHILDS != 0 {
                let (first, last) = match data.get(p..p + 2) {
                    Some(b) => (b[0], b[1]),
                    None => return Err(bad("truncated children")),
                };
                if first > last {
                    return Err(bad("bad child range"));
                }
                p += 2;
                for ch in first..=last {
                    let child = u32_at(p)?;
                    p += 4;
                    if child & NODE_MASK != 0 {
                        kids.push((child, ch));
                    }
                }
            }
            if off & NODE_VALUES != 0 {
                let count = u32_at(p)?;
                p += 4;
                for _ in 0..count {
                    let priority = u32_at(p)?;
                    p += 4;
                    let len = data
                        .get(p..)
                        .and_then(|d| d.iter().position(|&b| b == 0))
                        .ok_or_else(|| bad("unterminated value"))?;
                    node.values.push(Value {
                        priority,
                        value: data[p..p + len].to_vec(),
                    });
                    p += len + 1;
                }
            }
            let me = index.nodes.len();
            index.nodes.push(node);
            if let Some((parent, ch)) = parent {
                index.nodes[parent].children.push((ch, me as u32));
            }
            if index.nodes.len() > data.len() {
                return Err(bad("node loop"));
            }
            for (child, ch) in kids.into_iter().rev() {
                todo.push((child, Some((me, ch))));
            }
        }
        for n in &mut index.nodes {
            n.children.sort_by_key(|c| c.0);
        }
        Ok(index)
    }

    /// libkmod's `index_search`: the first value of exactly `key`.
    pub fn search(&self, key: &[u8]) -> Option<&[u8]> {
        let mut n = 0usize;
        let mut i = 0usize;
        loop {
            let node = &self.nodes[n];
            if key.get(i..i + node.prefix.len()) != Some(&node.prefix[..]) {
                return None;
            }
            i += node.prefix.len();
            if i == key.len() {
                return node.values.first().map(|v| v.value.as_slice());
            }
            n = node.child(key[i])?;
            i += 1;
        }
    }

    /// libkmod's `index_searchwild`: every value of every stored key that,
    /// read as an fnmatch pattern, matches `key`; in libkmod's order.
    pub fn search_wild(&self, key: &[u8]) -> Vec<Match> {
        let mut out = Vec::new();
        let mut n = 0usize;
        let mut i = 0usize;
        loop {
            let node = &self.nodes[n];
            for (j, &ch) in node.prefix.iter().enumerate() {
                if matches!(ch, b'*' | b'?' | b'[') {
                    let mut buf = key[..i + j].to_vec();
                    let lit = buf.len();
                    self.wild_all(n, j, &mut buf, lit, &key[i + j..], &mut out);
                    return out;
                }
                if key.get(i + j) != Some(&ch) {
                    return out;
                }
            }
            i += node.prefix.len();
            for wc in [b'*', b'?', b'['] {
                if let Some(c) = node.child(wc) {
                    let mut buf = key[..i].to_vec();
                    let lit = buf.len();
                    buf.push(wc);
                    self.wild_all(c, 0, &mut buf, lit, &key[i..], &mut out);
                }
            }
            if i == key.len() {
                self.all_values(n, key, &mut out);
                return out;
            }
            match node.child(key[i]) {
                Some(c) => {
                    n = c;
                    i += 1;
                }
                None => return out,
            }
        }
    }

    /// `buf[..lit]` is the literal part already matched; the pattern tail
    /// `buf[lit..]` is matched against `subkey`.
    fn wild_all(
        &self,
        n: usize,
        j: usize,
        buf: &mut Vec<u8>,
        lit: usize,
        subkey: &[u8],
        out: &mut Vec<Match>,
    ) {
        let node = &self.nodes[n];
        let pushed = node.prefix.len() - j;
        buf.extend_from_slice(&node.prefix[j..]);
        for &(ch, c) in &node.children {
            buf.push(ch);
            self.wild_all(c as usize, 0, buf, lit, subkey, out);
            buf.pop();
        }
        if !node.values.is_empty() && fnmatch(&buf[lit..], subkey) {
            let key = buf.clone();
            self.all_values(n, &key, out);
        }
        buf.truncate(buf.len() - pushed);
    }

    fn all_values(&self, n: usize, key: &[u8], out: &mut Vec<Match>) {
        for v in &self.nodes[n].values {
            let at = out
                .iter()
                .position(|m| m.priority >= v.priority)
                .unwrap_or(out.len());
            out.insert(
                at,
                Match {
                    key: key.to_vec(),
                    value: v.value.clone(),
                    priority: v.priority,
                },
            );
        }
    }

    /// Every (key, value) pair, keys in byte order.
    pub fn entries(&self) -> Vec<(Vec<u8>, Value)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        self.collect(0, &mut buf, &mut out);
        out
    }

    fn collect(&self, n: usize, buf: &mut Vec<u8>, out: &mut Vec<(Vec<u8>, Value)>) {
        let node = &self.nodes[n];
        let len = buf.len();
        buf.extend_from_slice(&node.prefix);
        for v in &node.values {
            out.push((buf.clone(), v.clone()));
        }
        for &(ch, c) in &node.children {
            buf.push(ch);
            self.collect(c as usize, buf, out);
            buf.pop();
        }
        buf.truncate(len);
    }
}

/// One value under one key, for [`write`].
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub priority: u32,
}

/// The file of the index that inserting `entries` in this order builds
/// (what [`Index::insert`] each, then [`Index::to_bytes`], give), written
/// straight from the sorted keys without building the trie.
pub fn write(entries: &[Entry]) -> Result<Vec<u8>, IndexError> {
    for e in entries {
        check_ascii(e.key, "key")?;
        check_ascii(e.value, "value")?;
    }
    // By key; a key's values by priority, equal ones newest first (as
    // `add_value` leaves them).
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        let (x, y) = (&entries[a], &entries[b]);
        x.key
            .cmp(y.key)
            .then(x.priority.cmp(&y.priority))
            .then(b.cmp(&a))
    });
    // Each distinct key: its range of `order`.
    let mut keys: Vec<(usize, usize)> = Vec::new();
    for (i, &e) in order.iter().enumerate() {
        match keys.last_mut() {
            Some(k) if entries[order[k.0]].key == entries[e].key => k.1 = i + 1,
            _ => keys.push((i, i + 1)),
        }
    }
    let mut out = Vec::with_capacity(64 + entries.len() * 48);
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    let w = Writer {
        entries,
        order: &order,
    };
    let root = if keys.is_empty() {
        out.len() as u32
    } else {
        w.node(&keys, 0, true, &mut out)
    };
    out[8..12].copy_from_slice(&root.to_be_bytes());
    Ok(out)
}

struct Writer<'a> {
    entries: &'a [Entry<'a>],
    order: &'a [usize],
}

impl Writer<'_> {
    fn key(&self, k: (usize, usize)) -> &[u8] {
        self.entries[self.order[k.0]].key
    }

    /// Writes the node for `keys` (sorted, at least one, all alike up to
    /// `depth`) after its children, as [`Index::to_bytes`] lays it out;
    /// returns its offset word.
    fn node(&self, keys: &[(usize, usize)], depth: usize, root: bool, out: &mut Vec<u8>) -> u32 {
        let first = self.key(keys[0]);
        let last = self.key(keys[keys.len() - 1]);
        // The root keeps an empty prefix, as an inserted-into index does.
        let common = if root {
            0
        } else {
            first[depth..]
                .iter()
                .zip(&last[depth..])
                .take_while(|(a, b)| a == b)
                .count()
        };
        let end = depth + common;
        let mut i = 0;
        let values = if first.len() == end {
            i = 1;
            Some(keys[0])
        } else {
            None
        };
        let mut children: Vec<(u8, u32)> = Vec::new();
        while i < keys.len() {
            let ch = self.key(keys[i])[end];
            let mut j = i + 1;
            while j < keys.len() && self.key(keys[j])[end] == ch {
                j += 1;
            }
            children.push((ch, self.node(&keys[i..j], end + 1, false, out)));
            i = j;
        }
        let mut offset = out.len() as u32;
        if common > 0 {
            out.extend_from_slice(&first[depth..end]);
            out.push(0);
            offset |= NODE_PREFIX;
        }
        if let (Some(lo), Some(hi)) = (children.first(), children.last()) {
            out.push(lo.0);
            out.push(hi.0);
            let mut k = 0;
            for ch in lo.0..=hi.0 {
                let at = match children.get(k) {
                    Some(c) if c.0 == ch => {
                        k += 1;
                        c.1
                    }
                    _ => 0,
                };
                out.extend_from_slice(&at.to_be_bytes());
            }
            offset |= NODE_CHILDS;
        }
        if let Some((from, to)) = values {
            out.extend_from_slice(&((to - from) as u32).to_be_bytes());
            for &e in &self.order[from..to] {
                let e = &self.entries[e];
                out.extend_from_slice(&e.priority.to_be_bytes());
                out.extend_from_slice(e.value);
                out.push(0);
            }
            offset |= NODE_VALUES;
        }
        offset
    }
}

/// POSIX `fnmatch(pattern, string, 0)`: `*` and `?` match any character
/// (`/` included), `[...]` sets with ranges, `!`/`^` negation and
/// `[:class:]`, and `\` escapes the next character.
pub fn fnmatch(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() || p < pattern.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p + 1, i));
                    p += 1;
                    continue;
                }
                b'?' => {
                    if i < s.len() {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
                b'[' => {
                    if i < s.len() {
                        match bracket(pattern, p, s[i]) {
                            Some((true, next)) => {
                                p = next;
                                i += 1;
                                continue;
                            }
                            Some((false, _)) => {}
                            None => {
                                // An unterminated `[` matches itself.
                                if s[i] == b'[' {
                                    p += 1;
                                    i += 1;
                                    continue;
                                }
                            }
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if i < s.len() && s[i] == pattern[p + 1] {
                        p += 2;
                        i += 1;
                        continue;
                    }
                }
                c => {
                    if i < s.len() && s[i] == c {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, si)) if si < s.len() => {
                star = Some((sp, si + 1));
                p = sp;
                i = si + 1;
            }
            _ => return false,
        }
    }
    true
}

/// Matches `c` against the bracket expression at `pattern[p]` (`[`).
/// Returns (matched, index after `]`), or None if the bracket is not closed.
fn bracket(pattern: &[u8], p: usize, c: u8) -> Option<(bool, usize)> {
    let mut k = p + 1;
    let negate = matches!(pattern.get(k), Some(b'!' | b'^'));
    if negate {
        k += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let ch = *pattern.get(k)?;
        if ch == b']' && !first {
            return Some((matched != negate, k + 1));
        }
        first = false;
        if ch == b'[' && pattern.get(k + 1) == Some(&b':') {
            let end = pattern[k + 2..].windows(2).position(|w| w == b":]")?;
            let class = &pattern[k + 2..k + 2 + end];
            matched |= match class {
                b"alpha" => c.is_ascii_alphabetic(),
                b"digit" => c.is_ascii_digit(),
                b"alnum" => c.is_ascii_alphanumeric(),
                b"upper" => c.is_ascii_uppercase(),
                b"lower" => c.is_ascii_lowercase(),
                b"space" => c.is_ascii_whitespace(),
                b"xdigit" => c.is_ascii_hexdigit(),
                b"punct" => c.is_ascii_punctuation(),
                b"print" => (0x20..0x7f).contains(&c),
                b"graph" => c.is_ascii_graphic(),
                b"cntrl" => c.is_ascii_control(),
                b"blank" => c == b' ' || c == b'\t',
                _ => false,
            };
            k += end + 4;
            continue;
        }
        let lo = if ch == b'\\' {
            k += 1;
            *pattern.get(k)?
        } else {
            ch
        };
        if pattern.get(k + 1) == Some(&b'-') && pattern.get(k + 2).is_some_and(|&h| h != b']') {
            let mut hi_at = k + 2;
            if pattern[hi_at] == b'\\' {
                hi_at += 1;
            }
            let hi = *pattern.get(hi_at)?;
            matched |= lo <= c && c <= hi;
            k = hi_at + 1;
        } else {
            matched |= lo == c;
            k += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnmatch_basics() {
        assert!(fnmatch(
            b"pci:v00001AF4d*sv*sd*bc*sc*i*",
            b"pci:v00001AF4d00001042sv00001AF4sd00001042bc01sc80i00"
        ));
        assert!(!fnmatch(b"pci:v00008086d*", b"pci:v00001AF4d00001042"));
        assert!(fnmatch(b"a?c", b"abc"));
        assert!(!fnmatch(b"a?c", b"ac"));
        assert!(fnmatch(b"x[0-9]y", b"x5y"));
        assert!(!fnmatch(b"x[!0-9]y", b"x5y"));
        assert!(fnmatch(b"x[]]y", b"x]y"));
        assert!(fnmatch(b"*", b""));
        assert!(fnmatch(b"a*b*c", b"aXbYbZc"));
        assert!(fnmatch(b"a\\*", b"a*"));
        assert!(!fnmatch(b"a\\*", b"ab"));
        assert!(fnmatch(b"[[:digit:]]x", b"7x"));
        assert!(fnmatch(b"ab[", b"ab["));
    }

    #[test]
    fn trie_round_trip_and_search() {
        let mut idx = Index::new();
        for (k, v, p) in [
            ("ask", "1", 3),
            ("ate", "2", 1),
            ("on", "3", 0),
            ("once", "4", 2),
            ("one", "5", 2),
            ("one", "6", 2),
            ("o*", "7", 5),
        ] {
            idx.insert(k.as_bytes(), v.as_bytes(), p).unwrap();
        }
        assert_eq!(idx.search(b"on"), Some(&b"3"[..]));
        assert_eq!(
            idx.search(b"one"),
            Some(&b"6"[..]),
            "equal priority: newest first"
        );
        assert_eq!(idx.search(b"o"), None);
        assert_eq!(idx.search(b"onex"), None);
        let bytes = idx.to_bytes();
        let back = Index::from_bytes(&bytes).unwrap();
        assert_eq!(back.to_bytes(), bytes);
        assert_eq!(back.entries(), idx.entries());
        let wild: Vec<_> = idx
            .search_wild(b"once")
            .into_iter()
            .map(|m| (String::from_utf8(m.key).unwrap(), m.priority))
            .collect();
        assert_eq!(wild, vec![("once".into(), 2), ("o*".into(), 5)]);
    }

    #[test]
    fn insertion_order_does_not_change_the_bytes() {
        let keys = [
            "virtio:d00000002v*",
            "virtio:d00000001v*",
            "pci:v*d*",
            "pci:v00001AF4*",
            "p",
        ];
        let mut a = Index::new();
        let mut b = Index::new();
        for (i, k) in keys.iter().enumerate() {
            a.insert(k.as_bytes(), b"m", i as u32).unwrap();
        }
        for (i, k) in keys.iter().enumerate().rev() {
            b.insert(k.as_bytes(), b"m", i as u32).unwrap();
        }
        assert_eq!(a.to_bytes(), b.to_bytes());
    }

    #[test]
    fn writes_what_inserting_builds() {
        // Keys that are prefixes of each other, shared stems, the empty
        // key, repeated keys and values, equal and unequal priorities.
        let mut seed = 7u32;
        let mut next = move |n: u32| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (seed >> 16) % n
        };
        let mut owned: Vec<(Vec<u8>, Vec<u8>, u32)> = vec![(Vec::new(), b"root".to_vec(), 3)];
        for _ in 0..600 {
            let len = next(7) as usize;
            let key: Vec<u8> = (0..len).map(|_| b"ab*c?-"[next(6) as usize]).collect();
            let value = format!("v{}", next(5)).into_bytes();
            owned.push((key, value, next(4)));
        }
        let entries: Vec<Entry> = owned
            .iter()
            .map(|(k, v, p)| Entry {
                key: k,
                value: v,
                priority: *p,
            })
            .collect();
        let mut idx = Index::new();
        for e in &entries {
            idx.insert(e.key, e.value, e.priority).unwrap();
        }
        assert_eq!(write(&entries).unwrap(), idx.to_bytes());
        assert_eq!(write(&[]).unwrap(), Index::new().to_bytes());
        let one = [Entry {
            key: b"symbol:x",
            value: b"m",
            priority: 0,
        }];
        let mut idx = Index::new();
        idx.insert(b"symbol:x", b"m", 0).unwrap();
        assert_eq!(write(&one).unwrap(), idx.to_bytes());
        let bad = [Entry {
            key: "é".as_bytes(),
            value: b"m",
            priority: 0,
        }];
        assert!(write(&bad).is_err());
    }

    #[test]
    fn rejects_non_ascii() {
        let mut idx = Index::new();
        assert!(idx.insert("é".as_bytes(), b"x", 0).is_err());
    }
}
