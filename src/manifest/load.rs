//! Loading: read a manifest and everything it includes, in a fixed order.
//!
//! Input: a manifest path and command-line variables. Output: [`Loaded`],
//! the documents in precedence order (for each file: its includes in the
//! order listed, then the file itself, then its drop-ins in name order) and
//! the settings merged over them (a later document's setting wins).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::de::{from_node, Spanned};
use super::model::{AlignSpec, Defaults, ImageSettings, InitSpec, Manifest, MtimePolicySpec};
use super::node::{toml_doc, yaml_doc, Node, Pos};
use crate::entry::Origin;
use crate::error::{Error, Result};
use crate::policy::{AlignChoice, Asked, MtimeChoice};

#[derive(Debug, Default, Clone)]
pub struct LoadOptions {
    /// `--kver`: the kernel version (`${kver}`).
    pub kver: Option<String>,
    /// `--set name=value`, in order.
    pub set: Vec<(String, String)>,
    /// `--root`: overrides the manifest's `root`.
    pub root: Option<PathBuf>,
    /// `--kmoddir`: the kernel's module tree, outside the root.
    pub kmoddir: Option<PathBuf>,
    /// Profiles (`--profile`) read before the manifest, by name.
    pub profiles: Vec<String>,
    /// Drop-in files read after the manifest, in order (the system
    /// configuration's).
    pub dropins: Vec<PathBuf>,
}

/// One manifest file, parsed.
#[derive(Debug)]
pub struct Doc {
    pub file: Arc<str>,
    /// A position in the file, whose place the others share.
    place: Origin,
    /// The directory relative paths in this document start from.
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl Doc {
    pub fn origin(&self, pos: Pos) -> Origin {
        self.place.at(pos.line, pos.column)
    }

    /// The name of the document in origins (its path, or a profile's name).
    pub fn origin_file(&self) -> &Arc<str> {
        self.place.file()
    }
}

#[derive(Debug)]
pub struct Loaded {
    pub docs: Vec<Doc>,
    pub vars: BTreeMap<String, String>,
    pub root: PathBuf,
    pub defaults: Defaults,
    pub image: ImageSettings,
    /// `[image] max_size` in bytes, and where it was set.
    pub max_size: Option<(u64, Origin)>,
    /// The kernel's module tree when it is not in the root.
    pub kmoddir: Option<PathBuf>,
    /// The init the image gets (its profile is among `docs`).
    pub init: InitSpec,
    /// Where the init's profile (read after every other document) starts
    /// among the documents.
    pub init_docs: usize,
    /// For `init = "auto"`: which init it chose, and why.
    pub init_choice: Option<String>,
    /// Where `build` writes without `-o`: `[image] output` (default
    /// `/boot/initrd.img-${kver}`), inside the root.
    pub output: PathBuf,
    /// `[image] uki` and `[uki]`, files resolved.
    pub uki: crate::spec::UkiConfig,
    /// The architecture the image is for: its root's (that of the root's
    /// programs), else this machine's.
    pub arch: crate::arch::Arch,
}

impl Loaded {
    /// Whether a document named like profile `name` (`NAME.toml`) is among the
    /// documents: the profile itself, from wherever it was found.
    pub fn has_profile(&self, name: &str) -> bool {
        self.profile(name).is_some()
    }

    /// The document named like profile `name` (`NAME.toml`), if it is in.
    pub fn profile(&self, name: &str) -> Option<&Doc> {
        self.docs.iter().find(|d| is_profile(d, name))
    }

    /// Where document `i` stands in the order `[omit]` follows: its place,
    /// except that the init's profile, read last, stands first (it is part
    /// of what the documents asked for with `init`, and what a document
    /// leaves out of it stays out).
    pub fn rank(&self, i: usize) -> usize {
        if i >= self.init_docs {
            0
        } else {
            i + 1
        }
    }

    /// What the merged settings ask of the build's policy.
    pub fn asked(&self) -> Asked {
        let d = &self.defaults;
        Asked::Manifest {
            mtime: match d.mtime {
                None | Some(MtimePolicySpec::Source) => MtimeChoice::Source,
                Some(MtimePolicySpec::SourceDateEpoch) => MtimeChoice::SourceDateEpoch,
                Some(MtimePolicySpec::Fixed(t)) => MtimeChoice::Fixed(t),
            },
            align: match d.align {
                None | Some(AlignSpec::None) => AlignChoice::None,
                Some(AlignSpec::Bytes(n)) => AlignChoice::Bytes(n),
                Some(AlignSpec::Auto) => AlignChoice::Auto,
            },
            mode: self.image.align_mode,
            reflink: self.image.reflink,
        }
    }
}

/// A manifest's syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Toml,
    Yaml,
}

/// Parses a manifest's text; `place` (a position in it) names it in errors.
pub fn parse(text: &str, format: Format, place: &Origin) -> Result<Manifest> {
    let origin = |pos: Option<Pos>| {
        let p = pos.unwrap_or(Pos { line: 1, column: 1 });
        place.at(p.line, p.column)
    };
    if let Some(m) = streamed(text, format) {
        return Ok(m);
    }
    // `streamed` has tried TOML table by table already: what is left is
    // the whole parse, whose answer (a tree or an error) is the reference.
    let parsed = match format {
        Format::Toml => toml_doc::whole(text, &crate::manifest::node::Lines::new(text)),
        Format::Yaml => yaml_doc::parse(text),
    };
    let node = parsed.map_err(|e| Error::at(origin(e.pos), e.message))?;
    from_node(&node).map_err(|e| {
        let err = Error::at(origin(e.pos), e.message);
        match e.hint {
            Some(h) => err.with_hint(h),
            None => err,
        }
    })
}

/// A manifest whose rules (the tables of `[[dir]]`, `[[file]]`, ... in
/// TOML, the items of `dir:`, `file:`, ... in YAML) are each deserialized
/// as soon as they are parsed (see [`toml_doc::by_tables`] and
/// [`yaml_doc::parse_with`]), so that the tree of the whole document is
/// never held. None when the document cannot be read that way or has an
/// error: the whole document is then read, which gives the error as it
/// always has.
pub(crate) fn streamed(text: &str, format: Format) -> Option<Manifest> {
    fn push<T: serde::de::DeserializeOwned>(
        rules: &mut Vec<Spanned<T>>,
        table: &Node,
        failed: &mut bool,
    ) {
        match from_node(table) {
            Ok(r) => rules.push(r),
            Err(_) => *failed = true,
        }
    }
    let mut taken = Manifest::default();
    let mut failed = false;
    let mut take = |name: &str, table: Node| {
        let t = &mut taken;
        let f = &mut failed;
        match name {
            "binary" => push(&mut t.binary, &table, f),
            "file" => push(&mut t.file, &table, f),
            "dir" => push(&mut t.dir, &table, f),
            "symlink" => push(&mut t.symlink, &table, f),
            "hardlink" => push(&mut t.hardlink, &table, f),
            "node" => push(&mut t.node, &table, f),
            "pipe" => push(&mut t.pipe, &table, f),
            "socket" => push(&mut t.socket, &table, f),
            "tree" => push(&mut t.tree, &table, f),
            "glob" => push(&mut t.glob, &table, f),
            _ => return Some(table),
        }
        None
    };
    let root = match format {
        Format::Toml => {
            let lines = crate::manifest::node::Lines::new(text);
            toml_doc::by_tables(text, &lines, &mut take)?
        }
        Format::Yaml => yaml_doc::parse_with(text, Some(&mut take)).ok()?,
    };
    if failed {
        return None;
    }
    // A key written twice (YAML): the whole document says what that means.
    if let crate::manifest::node::Value::Map(entries) = &root.value {
        let mut keys: Vec<&str> = entries
            .iter()
            .filter_map(|(k, _)| match &k.value {
                crate::manifest::node::Value::Str(s) => Some(s.as_str()),
                _ => None,
            })
            .collect();
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            return None;
        }
    }
    let mut m: Manifest = from_node(&root).ok()?;
    drop(root);
    // The rest of the document holds none of them (TOML: by_tables reads
    // such a document whole; YAML: each list was given out whole, its key
    // is there with an empty list).
    fn put<T>(to: &mut Vec<T>, mut from: Vec<T>) {
        from.shrink_to_fit();
        if to.is_empty() {
            // Moved, not copied beside itself.
            *to = from;
        } else {
            to.append(&mut from);
        }
    }
    put(&mut m.binary, taken.binary);
    put(&mut m.file, taken.file);
    put(&mut m.dir, taken.dir);
    put(&mut m.symlink, taken.symlink);
    put(&mut m.hardlink, taken.hardlink);
    put(&mut m.node, taken.node);
    put(&mut m.pipe, taken.pipe);
    put(&mut m.socket, taken.socket);
    put(&mut m.tree, taken.tree);
    put(&mut m.glob, taken.glob);
    Some(m)
}

/// Reads and parses one manifest file, TOML or YAML by its extension.
pub fn read_doc(path: &Path) -> Result<Doc> {
    let file: Arc<str> = Arc::from(path.display().to_string());
    // A profile composer carries is named, not located in composer's cache.
    let place = match super::profiles::builtin_name(path) {
        Some(name) => Origin::in_profile(Arc::from(name), 1, 1),
        None => Origin::new(file.clone(), 1, 1),
    };
    let origin = |pos: Option<Pos>| {
        let p = pos.unwrap_or(Pos { line: 1, column: 1 });
        place.at(p.line, p.column)
    };
    let bytes = crate::io::read_regular(path, crate::io::MAX_INPUT).map_err(|e| {
        Error::usage(format!(
            "cannot read the manifest `{}`: {e}",
            path.display()
        ))
        .with_hint("a manifest is a UTF-8 text file of at most 64 MiB; check the path")
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let pos = super::node::pos_of(
            &String::from_utf8_lossy(e.as_bytes()),
            e.utf8_error().valid_up_to(),
        );
        Error::at(origin(Some(pos)), "the manifest is not UTF-8 text")
            .with_hint("manifests are UTF-8; write other bytes in paths as { escaped = '\\xHH' }")
    })?;
    let format = match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "toml" => Format::Toml,
        "yaml" | "yml" => Format::Yaml,
        _ => {
            return Err(Error::usage(format!(
                "`{}`: a manifest must end in .toml, .yaml or .yml",
                path.display()
            ))
            .with_hint("for a gen_init_cpio list use --list"))
        }
    };
    let manifest = parse(&text, format, &place)?;
    // Absolute, so that sources found beside the manifest stay valid from
    // any working directory (export-list writes them into lists).
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    Ok(Doc {
        place,
        file,
        dir,
        manifest,
    })
}

/// Expands `${name}` in `text` with `vars`; an unknown name is an error at
/// its position. `$${` stands for a literal `${`.
pub fn expand(text: &str, pos: Pos, doc: &Doc, vars: &BTreeMap<String, String>) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut offset = 0;
    while let Some(start) = rest.find("${") {
        // `$${` is a literal `${`.
        if rest[..start].ends_with('$') {
            out.push_str(&rest[..start - 1]);
            out.push_str("${");
            offset += start + 2;
            rest = &rest[start + 2..];
            continue;
        }
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        let name = &rest[start + 2..start + 2 + len];
        let Some(value) = vars.get(name) else {
            let column = var_column(&doc.file, pos, offset + start, name);
            let mut known: Vec<&str> = vars.keys().map(String::as_str).collect();
            known.sort();
            let hint = match crate::suggest::nearest(name, &known) {
                Some(n) => format!("did you mean `${{{n}}}`?"),
                None if name == "kver" => "pass --kver VERSION".to_string(),
                None => format!(
                    "define it under [vars] or with --set {name}=VALUE (known: {})",
                    known.join(", ")
                ),
            };
            return Err(Error::at(
                doc.place.at(pos.line, column),
                format!("unknown variable `${{{name}}}`"),
            )
            .with_hint(hint));
        };
        out.push_str(&rest[..start]);
        out.push_str(value);
        offset += start + 2 + len + 1;
        rest = &rest[start + 2 + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The column of the unknown `${name}` whose value starts at `pos`: looked
/// up in the manifest's own line, so that it is exact for quoted and plain
/// (YAML) strings alike; `offset` (bytes into the value) is the fallback
/// for values that span lines or contain escapes.
fn var_column(file: &str, pos: Pos, offset: usize, name: &str) -> u32 {
    let needle = format!("${{{name}}}");
    let text = crate::io::read_regular(Path::new(file), crate::io::MAX_INPUT)
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
    let in_line = text.and_then(|text| {
        let line = text.lines().nth(pos.line.checked_sub(1)? as usize)?;
        let from = line
            .char_indices()
            .nth(pos.column.checked_sub(1)? as usize)?
            .0;
        let mut i = from;
        loop {
            let at = i + line[i..].find(&needle)?;
            if !line[..at].ends_with('$') {
                return Some(pos.column + line[from..at].chars().count() as u32);
            }
            i = at + needle.len();
        }
    });
    in_line.unwrap_or(pos.column + 1 + offset as u32)
}

/// The running kernel's release, the default `${kver}` as for dracut and
/// mkinitcpio.
fn running_kernel() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

struct Loader<'o> {
    opts: &'o LoadOptions,
    docs: Vec<Doc>,
    /// Canonical paths being loaded, for cycle detection.
    stack: Vec<(PathBuf, String)>,
    /// Canonical paths loaded or being loaded: each file is read once,
    /// however many documents include it.
    seen: std::collections::HashSet<PathBuf>,
    /// Variables known so far (for include and drop-in paths).
    vars: BTreeMap<String, String>,
}

impl Loader<'_> {
    fn cli_vars(&mut self) {
        if let Some(k) = &self.opts.kver {
            self.vars.insert("kver".into(), k.clone());
        }
        for (k, v) in &self.opts.set {
            self.vars.insert(k.clone(), v.clone());
        }
    }

    fn load(&mut self, path: &Path, from: Option<Origin>) -> Result<()> {
        let canonical = std::fs::canonicalize(path).map_err(|e| {
            let msg = format!("cannot read the manifest `{}`: {e}", path.display());
            match &from {
                Some(o) => Error::at(o.clone(), msg),
                None => Error::usage(msg),
            }
            .with_hint("check the path (relative paths start at the including manifest)")
        })?;
        if let Some(i) = self.stack.iter().position(|(p, _)| *p == canonical) {
            let chain: Vec<&str> = self.stack[i..].iter().map(|(_, n)| n.as_str()).collect();
            let msg = format!(
                "include cycle: {} -> {}",
                chain.join(" -> "),
                path.display()
            );
            return Err(match from {
                Some(o) => Error::at(o, msg),
                None => Error::usage(msg),
            }
            .with_hint("remove one of the includes"));
        }
        if !self.seen.insert(canonical.clone()) {
            // Included before (by another document): its rules are in already.
            return Ok(());
        }
        let doc = read_doc(path)?;
        self.stack.push((canonical, path.display().to_string()));
        for (k, v) in &doc.manifest.vars {
            self.vars.insert(k.clone(), v.value.clone());
        }
        self.cli_vars();
        for inc in &doc.manifest.include {
            let rel = expand(inc, inc.pos, &doc, &self.vars)?;
            let target = if super::profiles::is_name(&rel) {
                self.profile(&rel, &doc.origin(inc.pos))?
            } else {
                doc.dir.join(rel)
            };
            self.load(&target, Some(doc.origin(inc.pos)))?;
        }
        let dropins = doc
            .manifest
            .dropins
            .as_ref()
            .map(|d| -> Result<(PathBuf, Origin)> {
                let rel = expand(d, d.pos, &doc, &self.vars)?;
                Ok((doc.dir.join(rel), doc.origin(d.pos)))
            })
            .transpose()?;
        self.docs.push(doc);
        if let Some((dir, origin)) = dropins {
            if dir.is_dir() {
                let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                    .map_err(|e| {
                        Error::at(
                            origin.clone(),
                            format!("cannot list `{}`: {e}", dir.display()),
                        )
                    })?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        matches!(
                            p.extension().and_then(|e| e.to_str()),
                            Some("toml" | "yaml" | "yml")
                        )
                    })
                    .collect();
                files.sort();
                for f in files {
                    self.load(&f, Some(origin.clone()))?;
                }
            }
        }
        self.stack.pop();
        Ok(())
    }
}

impl Loader<'_> {
    /// The file of profile `name`, looked up in the root of `--root`.
    fn profile(&self, name: &str, at: &Origin) -> Result<PathBuf> {
        let root = self.opts.root.clone().unwrap_or_else(|| PathBuf::from("/"));
        super::profiles::find(name, &root).map_err(|e| {
            Error::at(at.clone(), e)
                .with_hint("`composer build --help` lists where profiles are looked up")
        })
    }
}

fn merge_defaults(into: &mut Defaults, d: &Spanned<Defaults>) {
    let d = &d.value;
    into.uid = d.uid.or(into.uid);
    into.gid = d.gid.or(into.gid);
    into.file_mode = d.file_mode.or(into.file_mode);
    into.dir_mode = d.dir_mode.or(into.dir_mode);
    into.mtime = d.mtime.or(into.mtime);
    into.align = d.align.or(into.align);
}

/// Loads `path` with its includes and drop-ins.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Loaded> {
    let mut vars = BTreeMap::new();
    vars.insert("arch".to_string(), std::env::consts::ARCH.to_string());
    vars.insert("kver".to_string(), running_kernel());
    let mut loader = Loader {
        opts,
        docs: Vec::new(),
        stack: Vec::new(),
        seen: std::collections::HashSet::new(),
        vars: vars.clone(),
    };
    loader.cli_vars();
    let cli = Origin::new(Arc::from("<command line>"), 1, 1);
    for name in &opts.profiles {
        let p = loader.profile(name, &cli)?;
        loader.load(&p, Some(cli.clone()))?;
    }
    loader.load(path, None)?;
    for d in &opts.dropins {
        loader.load(d, None)?;
    }
    // The init: the last document's choice, and its profile after them all.
    let mut init = InitSpec::None;
    let mut init_at = None;
    for doc in &loader.docs {
        if let Some(i) = &doc.manifest.init {
            init = i.value;
            init_at = Some(doc.origin(i.pos));
        }
    }
    let mut init_choice = None;
    if init == InitSpec::Auto {
        let root = settings_root(&loader, opts)?;
        let at = init_at.clone().unwrap_or_else(|| cli.clone());
        let systemd_profile = loader.profile("init-systemd", &at)?;
        let crypt = crypt_of(&loader.docs, &root);
        let (chosen, why) = auto_init(&root, &systemd_profile, crypt)?;
        init = chosen;
        init_choice = Some(why);
    } else if init == InitSpec::Systemd {
        // Asked for by name: what the root lacks is said at that line, not
        // where the profile asks for it.
        let at = init_at.clone().unwrap_or_else(|| cli.clone());
        let root = settings_root(&loader, opts)?;
        let crypt = crypt_of(&loader.docs, &root);
        let missing = systemd_lacks(&root, &loader.profile("init-systemd", &at)?, crypt)?;
        if !missing.is_empty() {
            return Err(Error::at(
                at,
                format!(
                    "init = \"systemd\": the root `{}` lacks what the systemd init needs: {}",
                    root.display(),
                    crate::error::shorten(&missing)
                ),
            )
            .with_hint(format!(
                "{SYSTEMD_INIT_NEEDS}, or choose init = \"shell\" (\"auto\" chooses for you)"
            )));
        }
    }
    let profile = match init {
        InitSpec::Shell => Some("init-shell"),
        InitSpec::Systemd => Some("init-systemd"),
        InitSpec::None | InitSpec::Auto => None,
    };
    // Hostonly: a root on a LUKS volume bound to a Tang server needs the
    // clevis profile (and the network's pieces it includes); any other root
    // goes without them.
    if !loader.docs.iter().any(|d| is_profile(d, "clevis")) {
        let root = settings_root(&loader, opts)?;
        if let Some((volumes, at)) = bound_to_tang(&loader.docs, &root) {
            let at = at.with_rule(format!(
                "[stack] {} bound to a Tang server (a clevis token)",
                volumes.join(", ")
            ));
            let p = loader.profile("clevis", &at)?;
            loader.load(&p, Some(at))?;
        }
    }
    let init_docs = loader.docs.len();
    if let Some(name) = profile {
        let at = init_at.unwrap_or_else(|| cli.clone());
        let p = loader.profile(name, &at)?;
        loader.load(&p, Some(at))?;
    }
    // Variables, like every setting, follow the documents' order (an
    // include's value yields to the including file's); the command line wins.
    loader.vars = vars;
    for doc in &loader.docs {
        for (k, v) in &doc.manifest.vars {
            loader.vars.insert(k.clone(), v.value.clone());
        }
    }
    loader.cli_vars();
    let mut defaults = Defaults::default();
    let mut image = ImageSettings::default();
    let mut max_size = None;
    let mut output = PathBuf::from("/boot/initrd.img-${kver}");
    let mut uki = crate::spec::UkiConfig::default();
    // `[uki]` files: (the manifest's directory, the path) until the root is known.
    let mut uki_files: [Option<(PathBuf, String)>; 9] = Default::default();
    let mut microcode: Vec<(PathBuf, String)> = Vec::new();
    for doc in &loader.docs {
        let m = &doc.manifest;
        if let Some(u) = &m.uki {
            read_uki(
                u,
                doc,
                &loader.vars,
                &mut uki,
                &mut uki_files,
                &mut microcode,
            )?;
        }
        if let Some(d) = &m.defaults {
            merge_defaults(&mut defaults, d);
        }
        if let Some(i) = &m.image {
            image.order = i.order.or(image.order);
            image.parents = i.parents.or(image.parents);
            image.align_mode = i.align_mode.or(image.align_mode);
            image.reflink = i.reflink.or(image.reflink);
            if let Some(b) = i.uki {
                uki.build = b;
            }
            if let Some(m) = &i.max_size {
                let origin = doc.origin(m.pos);
                let bytes = m.value.bytes().ok_or_else(|| {
                    Error::at(origin.clone(), "max_size is not a size")
                        .with_hint("write bytes (50000000) or a number with K, M or G (\"48M\")")
                })?;
                max_size = Some((bytes, origin));
            }
            if let Some(o) = &i.output {
                let text = String::from_utf8_lossy(&o.value.0).into_owned();
                output = PathBuf::from(expand(&text, o.pos, doc, &loader.vars)?);
            }
        }
    }
    let root = settings_root(&loader, opts)?;
    if !root.is_dir() {
        return Err(Error::usage(format!(
            "the source root `{}` is not a directory",
            root.display()
        ))
        .with_hint("set `root` in the manifest or --root to an existing directory"));
    }
    let output = if output.as_os_str().to_string_lossy().contains("${kver}") {
        let kver = loader.vars.get("kver").cloned().unwrap_or_default();
        PathBuf::from(output.to_string_lossy().replace("${kver}", &kver))
    } else {
        output
    };
    let output = root.join(output.strip_prefix("/").unwrap_or(&output));
    let place = |(dir, text): (PathBuf, String)| {
        let p = PathBuf::from(text);
        // A key on a token is named by its URI, not a path.
        if crate::uki::sign::is_token_uri(&p) {
            return p;
        }
        match p.strip_prefix("/") {
            Ok(inside) => root.join(inside),
            Err(_) => dir.join(p),
        }
    };
    let [stub, kernel, splash, devicetree, sign_key, sign_cert, sign_passphrase_file, pcr_private_key, pcr_public_key] =
        uki_files.map(|f| f.map(place));
    uki.microcode = microcode.into_iter().map(place).collect();
    uki.stub = stub;
    uki.kernel = kernel;
    uki.splash = splash;
    uki.devicetree = devicetree;
    uki.sign_key = sign_key;
    uki.sign_cert = sign_cert;
    uki.sign_passphrase_file = sign_passphrase_file;
    uki.pcr_private_key = pcr_private_key;
    uki.pcr_public_key = pcr_public_key;
    let arch = crate::arch::Arch::of_root(&root).unwrap_or_else(crate::arch::Arch::host);
    Ok(Loaded {
        docs: loader.docs,
        vars: loader.vars,
        root,
        defaults,
        image,
        max_size,
        kmoddir: opts.kmoddir.clone(),
        init,
        init_docs,
        init_choice,
        output,
        uki,
        arch,
    })
}

/// What the systemd init needs that `root` lacks: the root's systemd, and
/// every program and unit that `profile` (the init-systemd profile)
/// requires, what the root's systemd version needs beyond its units
/// ([`crate::resolve::systemd::needs`]), and systemd-cryptsetup when the
/// image is to unlock LUKS volumes (`crypt`); empty when the root can carry it.
fn systemd_lacks(root: &Path, profile: &Path, crypt: Crypt) -> Result<Vec<String>> {
    let r = crate::resolve::root::Root::new(root);
    let exists = |p: &Path| r.resolve(p, true).is_ok_and(|h| h.exists());
    let systemd = "/usr/lib/systemd/systemd";
    if !exists(Path::new(systemd)) {
        return Ok(vec![systemd.to_string()]);
    }
    let on_path = |p: &str| {
        crate::resolve::elf::DEFAULT_SEARCH_PATH
            .iter()
            .any(|d| exists(&Path::new(d).join(p)))
    };
    let mut missing = Vec::new();
    if let Some(version) = crate::resolve::systemd::version(&r) {
        for need in crate::resolve::systemd::needs(version) {
            if !exists(Path::new(need.path)) {
                missing.push(format!("{} (systemd {version})", need.path));
            }
        }
    }
    // Debian 13 and later ship systemd-cryptsetup apart from systemd and
    // cryptsetup: a systemd image without it cannot unlock a LUKS root.
    let unlocks = match crypt {
        Crypt::Stack(has) => has,
        Crypt::IfTheRootHasCryptsetup => on_path("cryptsetup"),
    };
    let systemd_cryptsetup = "/usr/lib/systemd/systemd-cryptsetup";
    if unlocks && !exists(Path::new(systemd_cryptsetup)) {
        missing.push(format!(
            "{systemd_cryptsetup} (to unlock LUKS: Debian's systemd-cryptsetup package)"
        ));
    }
    let doc = read_doc(profile)?;
    let m = &doc.manifest;
    let programs = m.binaries.iter().map(|b| b.value.as_str()).chain(
        m.binary
            .iter()
            .filter(|b| !b.value.optional)
            .map(|b| b.value.name.value.as_str()),
    );
    for p in programs {
        let found = if p.starts_with('/') {
            exists(Path::new(p))
        } else {
            on_path(p)
        };
        if !found {
            missing.push(p.to_string());
        }
    }
    if let Some(s) = &m.systemd {
        for u in &s.value.units {
            let found = [
                "/etc/systemd/system",
                "/usr/lib/systemd/system",
                "/lib/systemd/system",
            ]
            .iter()
            .any(|d| exists(&Path::new(d).join(u.as_str())));
            if !found {
                missing.push(u.to_string());
            }
        }
    }
    Ok(missing)
}

/// Whether an image unlocks LUKS volumes, for [`systemd_lacks`].
#[derive(Clone, Copy, Debug)]
enum Crypt {
    /// A hostonly image: whether the running root's stack has a LUKS layer.
    Stack(bool),
    /// Any other: whether the root has cryptsetup (which the storage
    /// profile then takes, so the image may be asked to unlock).
    IfTheRootHasCryptsetup,
}

/// Whether the image of `docs` is to unlock LUKS volumes of `root`.
fn crypt_of(docs: &[Doc], root: &Path) -> Crypt {
    if stack_asked(docs).is_none() {
        return Crypt::IfTheRootHasCryptsetup;
    }
    match crate::stack::running(root) {
        Ok(stack) => Crypt::Stack(
            stack
                .layers
                .iter()
                .any(|l| matches!(l.kind, crate::stack::Kind::Crypt(_))),
        ),
        Err(_) => Crypt::IfTheRootHasCryptsetup,
    }
}

/// How to get what the systemd init needs.
const SYSTEMD_INIT_NEEDS: &str =
    "install them into the root (udevadm and systemd-udevd are in Debian's udev package)";

/// What `init = "auto"` chooses for `root`, and why: systemd when the root
/// can carry the systemd init ([`systemd_lacks`]), else the shell init.
fn auto_init(root: &Path, profile: &Path, crypt: Crypt) -> Result<(InitSpec, String)> {
    let missing = systemd_lacks(root, profile, crypt)?;
    Ok(match missing.as_slice() {
        [] => (
            InitSpec::Systemd,
            "init = \"auto\": the systemd init (the root has systemd, udevadm and the units the init needs)".into(),
        ),
        [only] if only == "/usr/lib/systemd/systemd" => (
            InitSpec::Shell,
            "init = \"auto\": the shell init (the root has no /usr/lib/systemd/systemd)".into(),
        ),
        _ => (
            InitSpec::Shell,
            format!(
                "init = \"auto\": the shell init, as the root has systemd but not all the systemd init needs: {}; for the systemd init, {SYSTEMD_INIT_NEEDS}",
                crate::error::shorten(&missing)
            ),
        ),
    })
}

/// The source root the documents (and `--root`) name.
/// `[stack]` merged over the documents, a later setting replacing an
/// earlier one: (keyfiles, where the table is) when from_root is on.
pub(crate) fn stack_asked(docs: &[Doc]) -> Option<(bool, Origin)> {
    let mut from_root = None;
    let mut keyfiles = false;
    for doc in docs {
        let Some(s) = &doc.manifest.stack else {
            continue;
        };
        if let Some(f) = s.value.from_root {
            from_root = Some((f, doc.origin(s.pos)));
        }
        if let Some(k) = s.value.keyfiles {
            keyfiles = k;
        }
    }
    let (on, origin) = from_root?;
    on.then_some((keyfiles, origin))
}

/// With `[stack] from_root`, the LUKS volumes of the running root bound to
/// a Tang server (a clevis token in their header), and where `[stack]` is:
/// the loader then takes the clevis profile (clevis, jose, curl and the
/// network's pieces), which an image for any other root goes without.
fn bound_to_tang(docs: &[Doc], root: &Path) -> Option<(Vec<String>, Origin)> {
    let (_, origin) = stack_asked(docs)?;
    let volumes = crate::stack::bound_to_tang(&crate::stack::running(root).ok()?);
    (!volumes.is_empty()).then_some((volumes, origin))
}

/// Whether `doc` is profile `name`: the profile itself, or a document named
/// like it (`NAME.toml`), from wherever it was found.
fn is_profile(doc: &Doc, name: &str) -> bool {
    doc.place.profile() == Some(name)
        || Path::new(&*doc.file)
            .file_name()
            .is_some_and(|n| n.to_str() == Some(&format!("{name}.toml")))
}

/// One document's `[uki]`: its settings into `uki`, its files (with the
/// document's directory, placed once the root is known) into `files` and
/// `microcode`; a later document's setting replaces an earlier one's.
fn read_uki(
    u: &Spanned<super::model::UkiSettings>,
    doc: &Doc,
    vars: &BTreeMap<String, String>,
    uki: &mut crate::spec::UkiConfig,
    uki_files: &mut [Option<(PathBuf, String)>; 9],
    microcode: &mut Vec<(PathBuf, String)>,
) -> Result<()> {
    let x = |t: &Option<String>| -> Result<Option<String>> {
        t.as_ref().map(|t| expand(t, u.pos, doc, vars)).transpose()
    };
    let v = &u.value;
    let files = [
        &v.stub,
        &v.kernel,
        &v.splash,
        &v.devicetree,
        &v.sign_key,
        &v.sign_cert,
        &v.sign_passphrase_file,
        &v.pcr_private_key,
        &v.pcr_public_key,
    ];
    for (slot, f) in uki_files.iter_mut().zip(files) {
        if let Some(text) = x(f)? {
            *slot = Some((doc.dir.clone(), text));
        }
    }
    if let Some(c) = x(&v.cmdline)? {
        uki.cmdline = Some(c);
    }
    if let Some(e) = x(&v.sign_engine)? {
        uki.sign_engine = Some(e);
    }
    if let Some(phases) = &v.phases {
        uki.phases = phases
            .iter()
            .map(|l| expand(l, u.pos, doc, vars))
            .collect::<Result<_>>()?;
    }
    if let Some(lines) = &v.sbat {
        uki.sbat = lines
            .iter()
            .map(|l| expand(l, u.pos, doc, vars))
            .collect::<Result<_>>()?;
    }
    if let Some(files) = &v.microcode {
        *microcode = files
            .iter()
            .map(|f| Ok((doc.dir.clone(), expand(f, u.pos, doc, vars)?)))
            .collect::<Result<_>>()?;
    }
    if let Some(profiles) = &v.profiles {
        uki.profiles = uki_profiles(profiles, |t| expand(t, u.pos, doc, vars)).map_err(|e| {
            Error::at(doc.origin(u.pos), e).with_hint(
                "give each profile its own `id` of lower-case letters, digits, `.`, `_` or `-`",
            )
        })?;
    }
    Ok(())
}

/// `[[uki.profiles]]` with their text expanded; an error (a message for the
/// `[uki]` table's place) for an ID systemd-boot cannot list, or two alike.
fn uki_profiles(
    profiles: &[super::model::UkiProfileSettings],
    expand: impl Fn(&str) -> Result<String>,
) -> std::result::Result<Vec<crate::spec::UkiProfileConfig>, String> {
    let mut out: Vec<crate::spec::UkiProfileConfig> = Vec::new();
    for p in profiles {
        let x = |t: &Option<String>| {
            t.as_deref()
                .map(&expand)
                .transpose()
                .map_err(|e| e.to_string())
        };
        crate::uki::check_profile_id(&p.id).map_err(|e| format!("[[uki.profiles]]: {e}"))?;
        if out.iter().any(|o| o.id == p.id) {
            return Err(format!(
                "[[uki.profiles]]: two profiles are named `{}`",
                p.id
            ));
        }
        out.push(crate::spec::UkiProfileConfig {
            id: p.id.clone(),
            title: x(&p.title)?,
            cmdline: x(&p.cmdline)?,
            append: x(&p.append)?,
        });
    }
    Ok(out)
}

fn settings_root(loader: &Loader, opts: &LoadOptions) -> Result<PathBuf> {
    if let Some(r) = &opts.root {
        return Ok(r.clone());
    }
    let mut root = PathBuf::from("/");
    for doc in &loader.docs {
        if let Some(r) = &doc.manifest.root {
            root = doc.dir.join(expand(r, r.pos, doc, &loader.vars)?);
        }
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole, for the tests: the manifest from the document's whole tree.
    fn whole(doc: &str, format: Format) -> String {
        let node = match format {
            Format::Toml => toml_doc::whole(doc, &crate::manifest::node::Lines::new(doc)),
            Format::Yaml => yaml_doc::parse(doc),
        }
        .unwrap();
        format!("{:?}", from_node::<Manifest>(&node).unwrap())
    }

    /// A manifest read rule by rule is the manifest the whole document
    /// gives; one with an error is not read that way.
    #[test]
    fn streamed_is_the_whole_manifest() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut streamed_docs = [0, 0];
        for dir in ["examples", "profiles", "dist"] {
            for e in walkdir::WalkDir::new(root.join(dir)).into_iter().flatten() {
                let (format, n) = match e.path().extension().and_then(|x| x.to_str()) {
                    Some("toml") => (Format::Toml, 0),
                    Some("yaml" | "yml") => (Format::Yaml, 1),
                    _ => continue,
                };
                let doc = std::fs::read_to_string(e.path()).unwrap();
                if let Some(m) = streamed(&doc, format) {
                    assert_eq!(
                        format!("{m:?}"),
                        whole(&doc, format),
                        "{}",
                        e.path().display()
                    );
                    streamed_docs[n] += 1;
                }
            }
        }
        assert!(
            streamed_docs[0] >= 3 && streamed_docs[1] >= 1,
            "{streamed_docs:?}"
        );
        let toml = "binary = [{ name = \"sh\" }]\n[[dir]]\npath = \"/a\"\n[[dir]]\npath = \"/b\"\nmode = \"0700\"\n[[symlink]]\npath = \"/c\"\ntarget = \"a\"\n[[segment]]\nname = \"s\"\n";
        let yaml = "binary:\n  - name: sh\ndir:\n  - path: /a\n  - {path: /b, mode: \"0700\"}\nsymlink:\n  - path: /c\n    target: a\nsegment:\n  - name: s\n";
        for (doc, format) in [(toml, Format::Toml), (yaml, Format::Yaml)] {
            let m = streamed(doc, format).expect("read rule by rule");
            assert_eq!(
                (
                    m.dir.len(),
                    m.symlink.len(),
                    m.binary.len(),
                    m.segment.len()
                ),
                (2, 1, 1, 1)
            );
            assert_eq!(format!("{m:?}"), whole(doc, format));
        }
        // An anchored list is left whole, and its alias repeats all of it.
        let doc = "dir: &d\n  - path: /a\n  - path: /b\nsymlink:\n  - path: /c\n    target: a\n";
        assert_eq!(
            format!("{:?}", streamed(doc, Format::Yaml).unwrap()),
            whole(doc, Format::Yaml)
        );
        // An unknown key in one rule or in the rest, a key written twice:
        // the whole document's error is the one.
        for (doc, format) in [
            (
                "[[dir]]\npath = \"/a\"\n[[dir]]\npth = \"/b\"\n",
                Format::Toml,
            ),
            ("[image]\nordr = 1\n[[dir]]\npath = \"/a\"\n", Format::Toml),
            ("dir:\n  - path: /a\n  - pth: /b\n", Format::Yaml),
            ("image:\n  ordr: 1\ndir:\n  - path: /a\n", Format::Yaml),
            ("dir:\n  - path: /a\ndir:\n  - path: /b\n", Format::Yaml),
        ] {
            assert!(streamed(doc, format).is_none(), "{doc}");
        }
    }

    #[test]
    fn later_documents_win_for_vars() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir(p.join("d")).unwrap();
        let a = "include = [\"b.toml\"]\ndropins = \"d\"\n[vars]\nx = \"a\"\ny = \"a\"\n";
        std::fs::write(p.join("a.toml"), a).unwrap();
        std::fs::write(
            p.join("b.toml"),
            "[vars]\nx = \"b\"\ny = \"b\"\nz = \"b\"\n",
        )
        .unwrap();
        std::fs::write(p.join("d/1.toml"), "[vars]\ny = \"d\"\n").unwrap();
        let l = load(&p.join("a.toml"), &LoadOptions::default()).unwrap();
        assert_eq!(l.vars["x"], "a", "the file wins over its include");
        assert_eq!(l.vars["y"], "d", "a drop-in wins over the file");
        assert_eq!(l.vars["z"], "b");
        let opts = LoadOptions {
            set: vec![("y".into(), "cli".into())],
            ..LoadOptions::default()
        };
        let l = load(&p.join("a.toml"), &opts).unwrap();
        assert_eq!(l.vars["y"], "cli", "--set wins over every manifest");
    }
}
