//! The values of ELF resolution: what is asked ([`BinaryRequest`],
//! [`ElfOptions`]), what is found ([`Object`], [`Edge`], [`Problem`]) and
//! the whole answer ([`Resolution`]), with the chains `composer why` shows.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use super::dlopen::{DlopenLevel, Priority};
use super::search::Hwcaps;
use crate::entry::Origin;
use crate::error::{Error, Warning};

/// The program search path used when none is given, inside the root.
pub const DEFAULT_SEARCH_PATH: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// How to resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfOptions {
    /// The source root: every path is looked up inside it.
    pub root: PathBuf,
    /// Directories (inside the root) searched for programs named without a
    /// `/`, in order.
    pub search_path: Vec<PathBuf>,
    /// CPU-specific `glibc-hwcaps` subdirectories (off by default: an image
    /// built on a new CPU must boot on an older one).
    pub hwcaps: Hwcaps,
    /// Which `.note.dlopen` dependencies to include.
    pub dlopen: DlopenLevel,
}

impl ElfOptions {
    /// Defaults for `root`: the default search path, no hwcaps,
    /// `recommended` dlopen dependencies.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ElfOptions {
            root: root.into(),
            search_path: DEFAULT_SEARCH_PATH.iter().map(PathBuf::from).collect(),
            hwcaps: Hwcaps::Off,
            dlopen: DlopenLevel::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// A program (ELF executable or `#!` script) and what running it loads.
    Program,
    /// A library by soname (searched as `dlopen` from a program without
    /// RPATH would search it) or by path, with its dependencies.
    Library,
}

/// One thing the user asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinaryRequest {
    /// A bare name (looked up on the search path, or for a library: a
    /// soname), or a path inside the root.
    pub name: PathBuf,
    pub kind: RequestKind,
    /// A missing program or library is a warning, and the request adds
    /// nothing, instead of an error.
    pub optional: bool,
    /// An optional request taken when the root has it, without a word when
    /// it does not (a missing dependency of what is found is still said).
    pub if_present: bool,
    /// Where the request was written (manifest line), for errors and `why`.
    pub origin: Option<Origin>,
}

impl BinaryRequest {
    pub fn program(name: impl Into<PathBuf>) -> Self {
        BinaryRequest {
            name: name.into(),
            kind: RequestKind::Program,
            optional: false,
            if_present: false,
            origin: None,
        }
    }

    pub fn library(soname: impl Into<PathBuf>) -> Self {
        BinaryRequest {
            kind: RequestKind::Library,
            ..Self::program(soname)
        }
    }

    pub fn optional(mut self, optional: bool) -> Self {
        self.optional = optional;
        self
    }

    /// Optional, and quiet when the root does not have it.
    pub fn if_present(mut self) -> Self {
        self.optional = true;
        self.if_present = true;
        self
    }

    pub fn at(mut self, origin: Origin) -> Self {
        self.origin = Some(origin);
        self
    }
}

impl fmt::Display for BinaryRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name.display())?;
        if let Some(o) = &self.origin {
            write!(f, " ({o})")?;
        }
        Ok(())
    }
}

/// One path the image needs, as it appears inside the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A regular file; `source` is its host path (root joined).
    File { source: PathBuf },
    /// A symlink with its target as stored (relative or absolute; an
    /// absolute target means the same path in the image).
    Symlink { target: PathBuf },
}

/// Why an object was loaded.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum How {
    /// The request itself.
    Named,
    /// PT_INTERP of the program.
    Interpreter,
    /// DT_NEEDED (or a filter) with this name.
    Needed(String),
    /// The interpreter of a `#!` script.
    Shebang,
    /// The command of a `#!/usr/bin/env NAME` script.
    Env(String),
    /// A `.note.dlopen` dependency.
    Dlopen {
        soname: String,
        feature: Option<String>,
        priority: Priority,
    },
    /// The loader file (`/etc/ld.so.cache`, musl's path file) through which
    /// the loader finds the library of this name.
    LoaderConfig(String),
}

impl fmt::Display for How {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            How::Named => f.write_str("named"),
            How::Interpreter => f.write_str("PT_INTERP"),
            How::Needed(n) => write!(f, "NEEDED {n}"),
            How::Shebang => f.write_str("#!"),
            How::Env(n) => write!(f, "#!/usr/bin/env {n}"),
            How::Dlopen {
                soname,
                feature,
                priority,
            } => {
                write!(f, "dlopen {soname} ({priority}")?;
                if let Some(x) = feature {
                    write!(f, ", feature {x}")?;
                }
                f.write_str(")")
            }
            How::LoaderConfig(n) => write!(f, "where the loader finds {n}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    /// An ELF object loaded dynamically (or a program that needs loading).
    Dynamic,
    /// An ELF object that needs no loader.
    Static,
    /// A `#!` script.
    Script,
    /// A file the loader reads to find libraries (`/etc/ld.so.cache`, musl's
    /// `ld-musl-<arch>.path`): needed when a library was found in a
    /// directory that only it names.
    LoaderConfig,
}

/// One loaded file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// The path it was loaded by (`/lib64/ld-linux-x86-64.so.2`,
    /// `/usr/bin/../lib/libfoo.so.1`): the directory searched plus the name.
    pub path: PathBuf,
    /// Its canonical path inside the root.
    pub real: PathBuf,
    /// The symlinks followed from `path` to `real`: (location, target).
    pub links: Vec<(PathBuf, PathBuf)>,
    pub kind: ObjectKind,
    /// Other paths the loader opens and finds to be this same file (same
    /// device and inode) before reusing it: they must exist in the image too.
    pub aliases: Vec<Alias>,
}

/// A further path to an already loaded object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alias {
    pub path: PathBuf,
    pub real: PathBuf,
    pub links: Vec<(PathBuf, PathBuf)>,
}

impl Object {
    /// Whether `p` names this object in the image (its load path, its
    /// canonical path, a symlink on the way, an alias): `Some(Some(link))`
    /// when through a symlink.
    fn is_named_by(&self, p: &Path) -> Option<Option<PathBuf>> {
        let via = |path: &Path, real: &Path, links: &[(PathBuf, PathBuf)]| {
            if path == p || real == p {
                Some(None)
            } else {
                links
                    .iter()
                    .find(|(l, _)| l == p)
                    .map(|(l, _)| Some(l.clone()))
            }
        };
        via(&self.path, &self.real, &self.links).or_else(|| {
            self.aliases
                .iter()
                .find_map(|a| via(&a.path, &a.real, &a.links))
        })
    }
}

/// `objects[from]` (or the request, when `None`) brought in `objects[to]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: Option<usize>,
    pub to: usize,
    pub how: How,
}

/// Something that could not be found or read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The object that wanted it (`None`: the request itself).
    pub from: Option<usize>,
    pub how: How,
    pub message: String,
    /// The directories searched, in order.
    pub searched: Vec<PathBuf>,
    /// Fatal problems fail a mandatory request and drop an optional one;
    /// others (a missing recommended dlopen library) are warnings.
    pub fatal: bool,
}

/// What one request resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub request: BinaryRequest,
    /// False when a fatal problem dropped it (its paths are not in
    /// [`Resolution::items`]).
    pub included: bool,
    /// Every object loaded, the request's own first.
    pub objects: Vec<Object>,
    pub edges: Vec<Edge>,
    pub problems: Vec<Problem>,
}

impl Resolved {
    /// The objects loaded on behalf of the request's own object (its
    /// interpreter, libraries, dlopen libraries, script interpreters; not
    /// loader configuration files).
    pub fn dependencies(&self) -> impl Iterator<Item = &Object> {
        self.objects
            .iter()
            .skip(1)
            .filter(|o| o.kind != ObjectKind::LoaderConfig)
    }

    pub fn has_fatal(&self) -> bool {
        self.problems.iter().any(|p| p.fatal)
    }
}

/// One way a path came into the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// Index into [`Resolution::requests`].
    pub request: usize,
    /// From the request's own object to the object holding the path.
    pub steps: Vec<Step>,
    /// When the path is a symlink on the way to the last object.
    pub via_link: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub how: How,
    pub path: PathBuf,
}

/// Everything [`resolve`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolution {
    /// Every path the image needs (absolute, inside the root), sorted and
    /// unique: regular files and symlinks. Parent directories are implied.
    pub items: BTreeMap<PathBuf, Item>,
    /// One per request, in request order.
    pub requests: Vec<Resolved>,
    /// Non-fatal problems, and fatal ones of optional requests.
    pub warnings: Vec<Warning>,
}

impl Resolution {
    /// The error for the fatal problems of mandatory requests, if any.
    pub fn error(&self) -> Option<Error> {
        let mut lines = Vec::new();
        let mut origin = None;
        for (i, r) in self.requests.iter().enumerate() {
            if r.request.optional {
                continue;
            }
            for p in r.problems.iter().filter(|p| p.fatal) {
                if origin.is_none() {
                    origin = Some(r.request.origin.clone());
                }
                lines.push(format!(
                    "{}: {}",
                    r.request.name.display(),
                    self.describe(i, p)
                ));
            }
        }
        let origin = origin?;
        let message = if lines.len() == 1 {
            lines.remove(0)
        } else {
            format!("{} problems:\n{}", lines.len(), lines.join("\n"))
        };
        let err = match origin {
            Some(o) => Error::at(o, message),
            None => Error::usage(message),
        };
        let omit = self
            .requests
            .iter()
            .find(|r| !r.request.optional && r.problems.iter().any(|p| p.fatal))
            .map(|r| {
                // A bare name is wherever the search path finds it.
                let name = r.request.name.display().to_string();
                let path = if r.request.name.is_absolute() {
                    name
                } else {
                    format!("/**/{name}")
                };
                format!("files = [{}]", toml::Value::String(path))
            })
            .unwrap_or_default();
        Some(err.with_fix(
            "install what is missing into the source root, or mark the entry optional",
            &omit,
        ))
    }

    /// A problem with the chain that led to it and the directories searched.
    pub(super) fn describe(&self, request: usize, p: &Problem) -> String {
        let mut s = p.message.clone();
        if let Some(from) = p.from {
            if let Some(c) = self.chains_to(request, from, 1).into_iter().next() {
                s.push_str(&format!("\n  wanted by: {}", self.render_chain(&c)));
                s.push_str(&format!(" -> [{}]", p.how));
            }
        }
        if !p.searched.is_empty() {
            let dirs: Vec<String> = p.searched.iter().map(|d| d.display().to_string()).collect();
            s.push_str(&format!("\n  searched: {}", dirs.join(":")));
        }
        s
    }

    /// Every path to put in the image, in order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.items.keys().map(PathBuf::as_path)
    }

    /// Every chain (up to a limit per object) that brought `path` into the
    /// image: `path` may be an object's load path, its canonical path, or a
    /// symlink on the way.
    pub fn why(&self, path: &Path) -> Vec<Chain> {
        const LIMIT: usize = 64;
        let mut out = Vec::new();
        for (ri, r) in self.requests.iter().enumerate() {
            if !r.included {
                continue;
            }
            for (oi, o) in r.objects.iter().enumerate() {
                let Some(via_link) = o.is_named_by(path) else {
                    continue;
                };
                for mut c in self.chains_to(ri, oi, LIMIT) {
                    c.via_link = via_link.clone();
                    out.push(c);
                }
            }
        }
        out
    }

    /// Up to `limit` chains from request `ri` to its object `oi`.
    pub fn chains_to(&self, ri: usize, oi: usize, limit: usize) -> Vec<Chain> {
        let r = &self.requests[ri];
        let mut incoming: HashMap<usize, Vec<&Edge>> = HashMap::new();
        for e in &r.edges {
            incoming.entry(e.to).or_default().push(e);
        }
        let mut chains = Vec::new();
        let mut stack = vec![oi];
        let mut rev_steps: Vec<Step> = Vec::new();
        walk_back(
            r,
            &incoming,
            oi,
            &mut stack,
            &mut rev_steps,
            &mut chains,
            limit,
        );
        chains
            .into_iter()
            .map(|mut steps: Vec<Step>| {
                steps.reverse();
                Chain {
                    request: ri,
                    steps,
                    via_link: None,
                }
            })
            .collect()
    }

    /// `bash (initrd.toml:3:1) -> /usr/bin/bash -> [NEEDED libtinfo.so.6]
    /// /usr/lib/x86_64-linux-gnu/libtinfo.so.6`.
    pub fn render_chain(&self, c: &Chain) -> String {
        let mut s = self.requests[c.request].request.to_string();
        for step in &c.steps {
            match step.how {
                How::Named => s.push_str(&format!(" -> {}", step.path.display())),
                _ => s.push_str(&format!(" -> [{}] {}", step.how, step.path.display())),
            }
        }
        if let Some(l) = &c.via_link {
            s.push_str(&format!(" (through the symlink {})", l.display()));
        }
        s
    }
}

fn walk_back(
    r: &Resolved,
    incoming: &HashMap<usize, Vec<&Edge>>,
    at: usize,
    stack: &mut Vec<usize>,
    rev_steps: &mut Vec<Step>,
    chains: &mut Vec<Vec<Step>>,
    limit: usize,
) {
    for e in incoming.get(&at).map(Vec::as_slice).unwrap_or_default() {
        if chains.len() >= limit {
            return;
        }
        rev_steps.push(Step {
            how: e.how.clone(),
            path: r.objects[at].path.clone(),
        });
        match e.from {
            None => chains.push(rev_steps.clone()),
            Some(f) if !stack.contains(&f) => {
                stack.push(f);
                walk_back(r, incoming, f, stack, rev_steps, chains, limit);
                stack.pop();
            }
            Some(_) => {}
        }
        rev_steps.pop();
    }
}
