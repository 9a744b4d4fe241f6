//! The tree the kernel builds while it unpacks, as far as a reader of the
//! image needs it: which names exist, as what. A trie of path components,
//! so that looking a name up costs its length, however deep the tree is.

use std::collections::HashMap;

/// What a path holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    Symlink(Vec<u8>),
    /// A regular file, numbered so a hardlink knows it is still the same.
    File(usize),
    Other,
}

struct Node {
    parent: usize,
    name: Box<[u8]>,
    kind: Kind,
    children: HashMap<Box<[u8]>, usize>,
}

/// Why a directory cannot be reached.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Missing {
    /// This path does not exist (yet).
    NotFound(Vec<u8>),
    /// This path exists and is not a directory.
    NotDir(Vec<u8>),
    /// This path is a symlink and symlinks are not followed.
    Symlink(Vec<u8>),
    /// Too many symlinks on the way.
    Loop,
}

/// The root is node 0, a directory.
pub(crate) struct Tree {
    nodes: Vec<Node>,
}

pub(crate) const ROOT: usize = 0;

/// The components of a name as path lookup sees them: `.` and empty ones
/// vanish, `..` stays.
pub(crate) fn components(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    name.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
}

impl Tree {
    pub fn new() -> Tree {
        Tree {
            nodes: vec![Node {
                parent: ROOT,
                name: Box::default(),
                kind: Kind::Dir,
                children: HashMap::new(),
            }],
        }
    }

    pub fn kind(&self, id: usize) -> &Kind {
        &self.nodes[id].kind
    }

    pub fn parent(&self, id: usize) -> usize {
        self.nodes[id].parent
    }

    /// Whether a directory has anything in it.
    pub fn has_children(&self, id: usize) -> bool {
        !self.nodes[id].children.is_empty()
    }

    pub fn child(&self, dir: usize, name: &[u8]) -> Option<usize> {
        self.nodes[dir].children.get(name).copied()
    }

    /// The path of a node from the root, without a leading `/`.
    pub fn path(&self, id: usize) -> Vec<u8> {
        let mut parts = Vec::new();
        let mut at = id;
        while at != ROOT {
            parts.push(&*self.nodes[at].name);
            at = self.nodes[at].parent;
        }
        parts.reverse();
        parts.join(&b'/')
    }

    /// `dir`'s path with `name` appended, for messages.
    pub fn path_with(&self, dir: usize, name: &[u8]) -> Vec<u8> {
        let mut p = self.path(dir);
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        p
    }

    /// The directory `parts` lead to from `start`. With `follow`, symlinks
    /// are followed as the kernel's lookups follow them (an absolute target
    /// starts again at the root, `..` climbs, never above the root);
    /// without, a symlink on the way is [`Missing::Symlink`].
    pub fn dir<'p>(
        &self,
        start: usize,
        parts: impl IntoIterator<Item = &'p [u8]>,
        follow: bool,
    ) -> Result<usize, Missing> {
        // Components of symlink targets still to walk (last first), before
        // the rest of `parts`.
        let mut todo: Vec<Vec<u8>> = Vec::new();
        let mut parts = parts.into_iter();
        let mut at = start;
        let mut links = 0;
        loop {
            let c: std::borrow::Cow<[u8]> = match todo.pop() {
                Some(c) => c.into(),
                None => match parts.next() {
                    Some(c) => c.into(),
                    None => break,
                },
            };
            if *c == b".."[..] {
                at = self.parent(at);
                continue;
            }
            let Some(next) = self.child(at, &c) else {
                return Err(Missing::NotFound(self.path_with(at, &c)));
            };
            match &self.nodes[next].kind {
                Kind::Dir => at = next,
                Kind::Symlink(target) if follow => {
                    links += 1;
                    if links > 40 {
                        return Err(Missing::Loop);
                    }
                    if target.starts_with(b"/") {
                        at = ROOT;
                    }
                    let mut more: Vec<Vec<u8>> = components(target).map(<[u8]>::to_vec).collect();
                    more.reverse();
                    todo.extend(more);
                }
                Kind::Symlink(_) => return Err(Missing::Symlink(self.path(next))),
                _ => return Err(Missing::NotDir(self.path(next))),
            }
        }
        Ok(at)
    }

    /// Makes `name` in `dir` hold `kind`, as the kernel does: an existing
    /// directory stays (mkdir's EEXIST, its content kept) when a directory
    /// comes again; anything else replaces what was there, and what a
    /// replaced directory held is gone. Returns the node and what it held.
    pub fn set(&mut self, dir: usize, name: &[u8], kind: Kind) -> (usize, Option<Kind>) {
        if let Some(id) = self.child(dir, name) {
            let before = self.nodes[id].kind.clone();
            if !(before == Kind::Dir && kind == Kind::Dir) {
                self.nodes[id].children.clear();
                self.nodes[id].kind = kind;
            }
            return (id, Some(before));
        }
        let id = self.nodes.len();
        self.nodes.push(Node {
            parent: dir,
            name: name.into(),
            kind,
            children: HashMap::new(),
        });
        self.nodes[dir].children.insert(name.into(), id);
        (id, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_follow_links_or_refuse_them() {
        let mut t = Tree::new();
        let (usr, _) = t.set(ROOT, b"usr", Kind::Dir);
        let (bin, _) = t.set(usr, b"bin", Kind::Dir);
        t.set(ROOT, b"bin", Kind::Symlink(b"usr/bin".to_vec()));
        t.set(ROOT, b"abs", Kind::Symlink(b"/usr".to_vec()));
        t.set(ROOT, b"loop", Kind::Symlink(b"loop".to_vec()));
        t.set(bin, b"sh", Kind::File(0));
        fn at(t: &Tree, p: &str, follow: bool) -> Result<usize, Missing> {
            t.dir(ROOT, components(p.as_bytes()), follow)
        }
        assert_eq!(at(&t, "bin", true), Ok(bin));
        assert_eq!(at(&t, "abs/bin/../bin", true), Ok(bin));
        assert_eq!(at(&t, "bin", false), Err(Missing::Symlink(b"bin".to_vec())));
        assert_eq!(
            at(&t, "bin/sh", true),
            Err(Missing::NotDir(b"usr/bin/sh".to_vec()))
        );
        assert_eq!(
            at(&t, "usr/lib", true),
            Err(Missing::NotFound(b"usr/lib".to_vec()))
        );
        assert_eq!(at(&t, "loop", true), Err(Missing::Loop));
        assert_eq!(at(&t, "../../usr", true), Ok(usr));
        assert_eq!(t.path(bin), b"usr/bin");
        // A directory again keeps its content; a file over it drops it.
        assert_eq!(t.set(ROOT, b"usr", Kind::Dir).1, Some(Kind::Dir));
        assert!(t.has_children(usr));
        t.set(ROOT, b"usr", Kind::Other);
        assert!(!t.has_children(usr));
        assert_eq!(
            at(&t, "usr/bin", true),
            Err(Missing::NotDir(b"usr".to_vec()))
        );
    }
}
