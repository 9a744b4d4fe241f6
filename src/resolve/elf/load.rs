//! The loader emulation: one link map per executed program, filled the way
//! glibc's `_dl_map_object_deps` fills it (breadth first, reusing an
//! already loaded object when a name or soname or the file itself matches),
//! with glibc's or musl's search order, then the `.note.dlopen` libraries.
//!
//! Input: the requests and options. Output: per request, the objects it
//! brings in, the edges saying why, and the problems met (see [`super`]).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::dlopen;
use super::model::{
    Alias, BinaryRequest, Edge, ElfOptions, How, Object, ObjectKind, Problem, RequestKind,
};
use super::parse::{self, Abi, Elf, HeadFile, DF_1_NODEFLIB};
use super::search;
use crate::resolve::sysroot::{usr_twin, Node, Sysroot, Walk};

/// How many `#!` interpreters may be stacked (the kernel allows 4 levels).
const MAX_SCRIPT_DEPTH: usize = 4;

/// What the start of a file says it is.
enum Content {
    Elf(Rc<Elf>),
    /// The `#!` line (without `#!`), up to the newline or 256 bytes.
    Script(Vec<u8>),
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    Glibc,
    Musl,
}

/// Per-ABI facts about the root.
struct AbiEnv {
    lib: String,
    platform: Option<&'static str>,
    defaults: Vec<PathBuf>,
    hwcaps: Vec<String>,
}

/// The ABI, flavor and loader that library requests assume.
#[derive(Clone)]
struct Context {
    abi: Abi,
    flavor: Flavor,
    interp: Option<PathBuf>,
}

/// What one request produced.
#[derive(Default)]
pub(crate) struct ReqOut {
    pub objects: Vec<Object>,
    pub edges: Vec<Edge>,
    pub problems: Vec<Problem>,
    by_path: HashMap<PathBuf, usize>,
    edge_set: HashSet<(Option<usize>, usize, How)>,
    config_missing: HashSet<PathBuf>,
}

impl ReqOut {
    fn object(&mut self, path: &Path, walk: &Walk, kind: ObjectKind) -> usize {
        if let Some(&i) = self.by_path.get(path) {
            return i;
        }
        let i = self.objects.len();
        self.objects.push(Object {
            path: path.to_path_buf(),
            real: walk.real.clone(),
            links: walk.links.clone(),
            kind,
            aliases: Vec::new(),
        });
        self.by_path.insert(path.to_path_buf(), i);
        i
    }

    fn edge(&mut self, from: Option<usize>, to: usize, how: How) {
        if self.edge_set.insert((from, to, how.clone())) {
            self.edges.push(Edge { from, to, how });
        }
    }

    fn problem(&mut self, from: Option<usize>, how: How, fail: Fail, fatal: bool) {
        self.problems.push(Problem {
            from,
            how,
            message: fail.message,
            searched: fail.searched,
            fatal,
        });
    }
}

/// A failed lookup.
struct Fail {
    message: String,
    searched: Vec<PathBuf>,
}

impl Fail {
    fn new(message: impl Into<String>) -> Self {
        Fail {
            message: message.into(),
            searched: Vec::new(),
        }
    }
}

/// A directory to search, and what the loader in the image needs to search
/// it as here.
#[derive(Clone, Debug)]
struct Dir {
    path: PathBuf,
    /// The loader file naming it (`/etc/ld.so.cache`, musl's path file).
    config: Option<PathBuf>,
    /// It comes from `$ORIGIN` in the program's own RPATH/RUNPATH, which the
    /// loader expands through /proc/self/exe.
    proc: bool,
}

impl Dir {
    fn plain(path: &Path) -> Dir {
        Dir {
            path: path.to_path_buf(),
            config: None,
            proc: false,
        }
    }
}

/// A library found on disk.
struct Found {
    path: PathBuf,
    walk: Rc<Walk>,
    elf: Rc<Elf>,
    id: (u64, u64),
    /// The loader file it was found through (`/etc/ld.so.cache`, musl's
    /// path file), which the image then needs.
    config: Option<PathBuf>,
    /// Found through the program's `$ORIGIN` (needs /proc at run time).
    proc: bool,
}

/// One object in a link map.
struct MapObj {
    obj: usize,
    names: Vec<Vec<u8>>,
    soname: Option<Vec<u8>>,
    id: (u64, u64),
    loader: Option<usize>,
    elf: Rc<Elf>,
    /// DT_RPATH (musl: DT_RUNPATH or else DT_RPATH), expanded.
    rpath: Option<Vec<Dir>>,
    /// DT_RUNPATH, expanded (glibc only).
    runpath: Option<Vec<Dir>>,
    is_main: bool,
    queued: bool,
}

/// One process's loaded objects.
struct Map {
    flavor: Flavor,
    abi: Abi,
    env: Rc<AbiEnv>,
    objs: Vec<MapObj>,
    main: Option<usize>,
    interp: Option<usize>,
    musl_path: Rc<search::MuslPath>,
}

pub(crate) struct Loader<'o> {
    opts: &'o ElfOptions,
    pub sys: Sysroot,
    contents: HashMap<PathBuf, Result<Rc<Content>, String>>,
    conf: Option<Rc<Vec<PathBuf>>>,
    envs: HashMap<Abi, Rc<AbiEnv>>,
    musl_paths: HashMap<PathBuf, Rc<search::MuslPath>>,
    context: Option<Context>,
}

impl<'o> Loader<'o> {
    pub fn new(opts: &'o ElfOptions) -> Self {
        Loader {
            opts,
            sys: Sysroot::new(&opts.root),
            contents: HashMap::new(),
            conf: None,
            envs: HashMap::new(),
            musl_paths: HashMap::new(),
            context: None,
        }
    }

    /// Resolves every request (programs first: they tell the ABI that
    /// library requests assume), returning the outputs in request order.
    pub fn run(&mut self, requests: &[BinaryRequest]) -> Vec<ReqOut> {
        let mut outs: Vec<Option<ReqOut>> = requests.iter().map(|_| None).collect();
        for pass in [RequestKind::Program, RequestKind::Library] {
            for (i, r) in requests.iter().enumerate() {
                if r.kind != pass {
                    continue;
                }
                let mut out = ReqOut::default();
                match r.kind {
                    RequestKind::Program => self.program_request(&mut out, r),
                    RequestKind::Library => self.library_request(&mut out, r),
                }
                outs[i] = Some(out);
            }
        }
        outs.into_iter().map(Option::unwrap_or_default).collect()
    }

    fn content(&mut self, real: &Path) -> Result<Rc<Content>, String> {
        if let Some(c) = self.contents.get(real) {
            return c.clone();
        }
        let c = self.read_content(real).map(Rc::new);
        self.contents.insert(real.to_path_buf(), c.clone());
        c
    }

    fn read_content(&self, real: &Path) -> Result<Content, String> {
        let file = self
            .sys
            .open(real)
            .map_err(|e| format!("cannot open {}: {e}", real.display()))?;
        let hf = HeadFile::new(file).map_err(|e| format!("cannot read {}: {e}", real.display()))?;
        let head = hf.head();
        if let Some(rest) = head.strip_prefix(b"#!") {
            let rest = &rest[..rest.len().min(254)];
            let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
            return Ok(Content::Script(line.to_vec()));
        }
        if !head.starts_with(b"\x7fELF") {
            return Ok(Content::Other);
        }
        match parse::parse(&hf) {
            Ok(elf) => Ok(Content::Elf(Rc::new(elf))),
            Err(e) => Err(format!("{}: {e}", real.display())),
        }
    }

    fn env(&mut self, abi: Abi) -> Rc<AbiEnv> {
        if let Some(e) = self.envs.get(&abi) {
            return e.clone();
        }
        let multiarch = search::is_multiarch(&mut self.sys, &abi);
        let env = Rc::new(AbiEnv {
            lib: search::lib_token(multiarch, &abi),
            platform: search::platform(&abi),
            defaults: search::default_dirs(multiarch, &abi),
            hwcaps: search::hwcaps_subdirs(&self.opts.hwcaps, &abi),
        });
        self.envs.insert(abi, env.clone());
        env
    }

    fn conf(&mut self) -> Rc<Vec<PathBuf>> {
        if self.conf.is_none() {
            self.conf = Some(Rc::new(search::ld_so_conf(&mut self.sys)));
        }
        self.conf.clone().unwrap_or_default()
    }

    fn musl_path(&mut self, interp: Option<&Path>) -> Rc<search::MuslPath> {
        let interp = interp.unwrap_or(Path::new("/lib/ld-musl.so.1"));
        if let Some(p) = self.musl_paths.get(interp) {
            return p.clone();
        }
        let p = Rc::new(search::musl_sys_path(&mut self.sys, interp));
        self.musl_paths.insert(interp.to_path_buf(), p.clone());
        p
    }

    // ---------------------------------------------------------------------------------
    // Programs and scripts
    // ---------------------------------------------------------------------------------

    fn program_request(&mut self, out: &mut ReqOut, r: &BinaryRequest) {
        match self.locate_program(&r.name) {
            Ok(path) => self.program(out, None, How::Named, &path, 0),
            Err(fail) => out.problem(None, How::Named, fail, true),
        }
    }

    /// Finds a program: a name with a `/` is a path inside the root, a bare
    /// name is looked up on the search path (first executable file wins).
    fn locate_program(&mut self, name: &Path) -> Result<PathBuf, Fail> {
        let bytes = name.as_os_str().as_bytes();
        if bytes.contains(&b'/') {
            // A root whose /usr is not merged keeps `/usr/lib/systemd/systemd`
            // at `/lib/systemd/systemd`: the same file in the merged image.
            let path = Path::new("/").join(name);
            if self.sys.walk(&path).is_err() {
                if let Some(twin) = usr_twin(&path).filter(|t| self.sys.walk(t).is_ok()) {
                    return Ok(twin);
                }
            }
            return Ok(path);
        }
        let mut searched = Vec::new();
        for dir in &self.opts.search_path {
            let dir = Path::new("/").join(dir);
            let cand = dir.join(name);
            if let Ok(w) = self.sys.walk(&cand) {
                if matches!(w.node, Node::File { exec: true, .. }) {
                    return Ok(cand);
                }
            }
            searched.push(dir);
        }
        Err(Fail {
            message: format!("program `{}` not found on the search path", name.display()),
            searched,
        })
    }

    /// Adds the program at `path` (an ELF executable or a `#!` script) and
    /// everything its execution loads.
    fn program(
        &mut self,
        out: &mut ReqOut,
        from: Option<usize>,
        how: How,
        path: &Path,
        depth: usize,
    ) {
        let walk = match self.sys.walk(path) {
            Ok(w) => w,
            Err(e) => {
                let fail = Fail::new(format!(
                    "{} does not exist in the root: {e}",
                    path.display()
                ));
                return out.problem(from, how, fail, true);
            }
        };
        if !matches!(walk.node, Node::File { .. }) {
            let fail = Fail::new(format!("{} is not a regular file", path.display()));
            return out.problem(from, how, fail, true);
        }
        let content = match self.content(&walk.real) {
            Ok(c) => c,
            Err(e) => return out.problem(from, how, Fail::new(e), true),
        };
        match &*content {
            Content::Script(line) => {
                let idx = out.object(path, &walk, ObjectKind::Script);
                out.edge(from, idx, how);
                self.script(out, idx, path, line, depth);
            }
            Content::Elf(elf) => {
                let kind = if elf.is_static() {
                    ObjectKind::Static
                } else {
                    ObjectKind::Dynamic
                };
                let idx = out.object(path, &walk, kind);
                out.edge(from, idx, how);
                if kind == ObjectKind::Dynamic {
                    let Node::File { dev, ino, .. } = walk.node else {
                        unreachable!("checked above")
                    };
                    self.link_program(out, idx, elf.clone(), &walk.real, (dev, ino));
                }
            }
            Content::Other => {
                let fail = Fail::new(format!(
                    "{} is neither an ELF file nor a #! script",
                    path.display()
                ));
                out.problem(from, how, fail, true);
            }
        }
    }

    fn script(&mut self, out: &mut ReqOut, idx: usize, path: &Path, line: &[u8], depth: usize) {
        if depth >= MAX_SCRIPT_DEPTH {
            let fail = Fail::new(format!(
                "{}: more than {MAX_SCRIPT_DEPTH} levels of #! interpreters",
                path.display()
            ));
            return out.problem(Some(idx), How::Shebang, fail, true);
        }
        let Some((interp, arg)) = parse_shebang(line) else {
            let fail = Fail::new(format!("{}: #! line names no interpreter", path.display()));
            return out.problem(Some(idx), How::Shebang, fail, true);
        };
        let interp_path = Path::new("/").join(OsStr::from_bytes(&interp));
        self.program(out, Some(idx), How::Shebang, &interp_path, depth + 1);
        let is_env = interp_path.file_name().is_some_and(|n| n == "env");
        if let (true, Some(arg)) = (is_env, arg) {
            if let Some(name) = env_command(&arg) {
                let how = How::Env(String::from_utf8_lossy(&name).into_owned());
                match self.locate_program(Path::new(OsStr::from_bytes(&name))) {
                    Ok(p) => self.program(out, Some(idx), how, &p, depth + 1),
                    Err(fail) => out.problem(Some(idx), how, fail, true),
                }
            }
        }
    }

    // ---------------------------------------------------------------------------------
    // Link maps
    // ---------------------------------------------------------------------------------

    fn new_map(&mut self, ctx: &Context) -> Map {
        let env = self.env(ctx.abi);
        let musl_path = match ctx.flavor {
            Flavor::Musl => self.musl_path(ctx.interp.as_deref()),
            Flavor::Glibc => Rc::default(),
        };
        Map {
            flavor: ctx.flavor,
            abi: ctx.abi,
            env,
            objs: Vec::new(),
            main: None,
            interp: None,
            musl_path,
        }
    }

    fn map_obj(
        map: &Map,
        obj: usize,
        name: Option<&[u8]>,
        (elf, id): (&Rc<Elf>, (u64, u64)),
        origin: &Path,
        loader: Option<usize>,
        is_main: bool,
    ) -> MapObj {
        let d = elf.dynamic.as_ref();
        let list = |v: Option<&Vec<u8>>| {
            v.map(|v| {
                v.split(|&b| b == b':')
                    .flat_map(|e| {
                        let proc = is_main && search::uses_origin(e);
                        search::path_list(e, origin, &map.env.lib, map.env.platform)
                            .into_iter()
                            .map(move |path| Dir {
                                path,
                                config: None,
                                proc,
                            })
                    })
                    .collect::<Vec<_>>()
            })
        };
        let (rpath, runpath) = match map.flavor {
            Flavor::Glibc => (
                list(d.and_then(|d| d.rpath.as_ref())),
                list(d.and_then(|d| d.runpath.as_ref())),
            ),
            Flavor::Musl => (
                list(d.and_then(|d| d.runpath.as_ref().or(d.rpath.as_ref()))),
                None,
            ),
        };
        MapObj {
            obj,
            names: name.map(|n| vec![n.to_vec()]).unwrap_or_default(),
            soname: elf.soname().map(<[u8]>::to_vec),
            id,
            loader,
            elf: elf.clone(),
            rpath,
            runpath,
            is_main,
            queued: false,
        }
    }

    /// Loads a dynamically linked program's interpreter and libraries.
    fn link_program(
        &mut self,
        out: &mut ReqOut,
        main: usize,
        elf: Rc<Elf>,
        real: &Path,
        id: (u64, u64),
    ) {
        let interp = elf
            .interp
            .as_ref()
            .map(|i| Path::new("/").join(OsStr::from_bytes(i)));
        let flavor = flavor_of(&elf);
        let ctx = Context {
            abi: elf.abi,
            flavor,
            interp: interp.clone(),
        };
        if self.context.is_none() {
            self.context = Some(ctx.clone());
        }
        let mut map = self.new_map(&ctx);
        // The kernel runs the program by its real path: $ORIGIN is its directory.
        let origin = real.parent().unwrap_or(Path::new("/")).to_path_buf();
        let m = Self::map_obj(&map, main, None, (&elf, id), &origin, None, true);
        map.objs.push(m);
        map.main = Some(0);
        if let Some(ipath) = &interp {
            match self.load_path(&map, ipath, true) {
                Ok(found) => {
                    let obj = out.object(&found.path, &found.walk, ObjectKind::Dynamic);
                    out.edge(Some(main), obj, How::Interpreter);
                    let iorigin = ipath.parent().unwrap_or(Path::new("/")).to_path_buf();
                    let raw = ipath.as_os_str().as_bytes();
                    let mo = Self::map_obj(
                        &map,
                        obj,
                        Some(raw),
                        (&found.elf, found.id),
                        &iorigin,
                        None,
                        false,
                    );
                    map.objs.push(mo);
                    map.interp = Some(map.objs.len() - 1);
                }
                Err(mut fail) => {
                    fail.message = format!("program interpreter {}", fail.message);
                    out.problem(Some(main), How::Interpreter, fail, true);
                }
            }
        }
        self.breadth_first(out, &mut map, 0);
        self.dlopen_phase(out, &mut map);
    }

    fn library_request(&mut self, out: &mut ReqOut, r: &BinaryRequest) {
        let ctx = self.context.clone().unwrap_or(Context {
            abi: search::host_abi(),
            flavor: Flavor::Glibc,
            interp: None,
        });
        let mut map = self.new_map(&ctx);
        let name = r.name.as_os_str().as_bytes();
        match self.map_object(out, &mut map, name, None) {
            Ok((i, _)) => {
                let obj = map.objs[i].obj;
                out.edge(None, obj, How::Named);
                self.breadth_first(out, &mut map, i);
                self.dlopen_phase(out, &mut map);
            }
            Err(fail) => out.problem(None, How::Named, fail, true),
        }
    }

    /// Loads the DT_NEEDED (and filter) libraries of `start` and of every
    /// object newly loaded, breadth first, as glibc does.
    fn breadth_first(&mut self, out: &mut ReqOut, map: &mut Map, start: usize) {
        let mut queue = vec![start];
        map.objs[start].queued = true;
        let mut qi = 0;
        while qi < queue.len() {
            let m = queue[qi];
            qi += 1;
            let elf = map.objs[m].elf.clone();
            let Some(d) = &elf.dynamic else { continue };
            let wanted = d
                .needed
                .iter()
                .map(|n| (n, false))
                .chain(d.filters.iter().map(|n| (n, false)))
                .chain(d.auxiliary.iter().map(|n| (n, true)));
            for (name, optional) in wanted {
                let how = How::Needed(String::from_utf8_lossy(name).into_owned());
                let from = map.objs[m].obj;
                match self.map_object(out, map, name, Some(m)) {
                    Ok((i, _)) => {
                        out.edge(Some(from), map.objs[i].obj, how);
                        if !map.objs[i].queued {
                            map.objs[i].queued = true;
                            queue.push(i);
                        }
                    }
                    // glibc ignores a missing DT_AUXILIARY filtee.
                    Err(_) if optional => {}
                    Err(fail) => out.problem(Some(from), how, fail, true),
                }
            }
        }
    }

    /// Loads the `.note.dlopen` libraries of every object in the map (also
    /// of those loaded here), with the noting object as the caller.
    fn dlopen_phase(&mut self, out: &mut ReqOut, map: &mut Map) {
        let level = self.opts.dlopen;
        if level == dlopen::DlopenLevel::None {
            return;
        }
        let mut i = 0;
        while i < map.objs.len() {
            let elf = map.objs[i].elf.clone();
            let from = map.objs[i].obj;
            for note in &elf.dlopen_notes {
                let (deps, problems) = dlopen::parse_note(note);
                for p in problems {
                    let how = How::Dlopen {
                        soname: String::new(),
                        feature: None,
                        priority: dlopen::Priority::Suggested,
                    };
                    out.problem(Some(from), how, Fail::new(p), false);
                }
                for dep in deps.into_iter().filter(|d| level.includes(d.priority)) {
                    let mut searched = Vec::new();
                    let mut reasons = Vec::new();
                    let mut done = false;
                    for soname in &dep.sonames {
                        let how = How::Dlopen {
                            soname: soname.clone(),
                            feature: dep.feature.clone(),
                            priority: dep.priority,
                        };
                        match self.map_object(out, map, soname.as_bytes(), Some(i)) {
                            Ok((j, _)) => {
                                out.edge(Some(from), map.objs[j].obj, how);
                                if !map.objs[j].queued {
                                    self.breadth_first(out, map, j);
                                }
                                done = true;
                                break;
                            }
                            Err(f) => {
                                reasons.push(f.message);
                                for s in f.searched {
                                    if !searched.contains(&s) {
                                        searched.push(s);
                                    }
                                }
                            }
                        }
                    }
                    if !done {
                        let feature = dep
                            .feature
                            .as_deref()
                            .map(|f| format!(" (feature {f})"))
                            .unwrap_or_default();
                        let fail = Fail {
                            message: format!(
                                "{} dlopen dependency{feature}: {}",
                                dep.priority,
                                reasons.join("; ")
                            ),
                            searched,
                        };
                        let how = How::Dlopen {
                            soname: dep.sonames.join(" | "),
                            feature: dep.feature.clone(),
                            priority: dep.priority,
                        };
                        let fatal = dep.priority == dlopen::Priority::Required;
                        out.problem(Some(from), how, fail, fatal);
                    }
                }
            }
            i += 1;
        }
    }

    /// `_dl_map_object`: the object `name` as needed by `loader`, reused when
    /// already in the map. Returns its map index and whether it is new.
    fn map_object(
        &mut self,
        out: &mut ReqOut,
        map: &mut Map,
        name: &[u8],
        loader: Option<usize>,
    ) -> Result<(usize, bool), Fail> {
        // Already loaded under this name, or (glibc) with this soname?
        for (i, o) in map.objs.iter_mut().enumerate() {
            if o.names.iter().any(|n| n == name) {
                return Ok((i, false));
            }
            if map.flavor == Flavor::Glibc && o.soname.as_deref() == Some(name) {
                o.names.push(name.to_vec());
                return Ok((i, false));
            }
        }
        if map.flavor == Flavor::Musl && musl_reserved(name) {
            if let Some(i) = map.interp {
                return Ok((i, false));
            }
        }
        let origin = loader
            .map(|l| self.origin_of(out, map, l))
            .unwrap_or_else(|| PathBuf::from("/"));
        let found = if name.contains(&b'/') || name.contains(&b'$') {
            let expanded = search::expand_tokens(name, &origin, &map.env.lib, map.env.platform)
                .ok_or_else(|| {
                    Fail::new(format!(
                        "{}: cannot expand its dynamic string tokens",
                        String::from_utf8_lossy(name)
                    ))
                })?;
            if expanded.contains(&b'/') {
                let p = Path::new("/").join(OsStr::from_bytes(&expanded));
                let mut f = self.load_path(map, &p, false)?;
                f.proc = loader.is_some_and(|l| map.objs[l].is_main) && search::uses_origin(name);
                f
            } else {
                self.search(map, &expanded, loader)?
            }
        } else {
            self.search(map, name, loader)?
        };
        let from = loader.map(|l| map.objs[l].obj);
        // The same file under another name?
        if let Some(i) = map.objs.iter().position(|o| o.id == found.id) {
            map.objs[i].names.push(name.to_vec());
            // The loader opened this path to find that out: the image needs it.
            let o = &mut out.objects[map.objs[i].obj];
            let known = o.path == found.path || o.aliases.iter().any(|a| a.path == found.path);
            if !known {
                o.aliases.push(Alias {
                    path: found.path.clone(),
                    real: found.walk.real.clone(),
                    links: found.walk.links.clone(),
                });
            }
            self.run_time_needs(out, from, name, &found);
            return Ok((i, false));
        }
        let kind = if found.elf.is_static() {
            ObjectKind::Static
        } else {
            ObjectKind::Dynamic
        };
        let obj = out.object(&found.path, &found.walk, kind);
        let origin = found.path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let mo = Self::map_obj(
            map,
            obj,
            Some(name),
            (&found.elf, found.id),
            &origin,
            loader,
            false,
        );
        map.objs.push(mo);
        self.run_time_needs(out, from, name, &found);
        Ok((map.objs.len() - 1, true))
    }

    /// What the loader in the image needs besides the file to find it the
    /// same way: the loader file naming its directory, and /proc when the
    /// directory comes from the program's own `$ORIGIN`.
    fn run_time_needs(
        &mut self,
        out: &mut ReqOut,
        from: Option<usize>,
        name: &[u8],
        found: &Found,
    ) {
        if let Some(config) = &found.config {
            self.need_config(out, from, name, config);
        }
        if found.proc {
            let name = String::from_utf8_lossy(name).into_owned();
            let fail = Fail::new(format!(
                "{name} is found through $ORIGIN of the program itself, which the loader \
                 expands from /proc/self/exe: the program can start only once /proc is \
                 mounted (not as /init)"
            ));
            out.problem(from, How::Needed(name), fail, false);
        }
    }

    /// Adds the loader file a library was found through (`/etc/ld.so.cache`
    /// or musl's path file) to the request, or a warning when the root lacks
    /// it: without it the loader in the image will not look where the
    /// library is.
    fn need_config(&mut self, out: &mut ReqOut, from: Option<usize>, name: &[u8], config: &Path) {
        let how = How::LoaderConfig(String::from_utf8_lossy(name).into_owned());
        match self.sys.walk(config) {
            Ok(w) if matches!(w.node, Node::File { .. }) => {
                let obj = out.object(config, &w, ObjectKind::LoaderConfig);
                out.edge(from, obj, how);
            }
            _ => {
                if out.config_missing.insert(config.to_path_buf()) {
                    let fail = Fail::new(format!(
                        "{} was found through a directory the loader learns from {}, which the root lacks: \
                         the loader in the image will not find it (for glibc, run `ldconfig -r ROOT`)",
                        String::from_utf8_lossy(name),
                        config.display()
                    ));
                    out.problem(from, how, fail, false);
                }
            }
        }
    }

    /// `$ORIGIN` of a map object: the directory of the path it was loaded by
    /// (for the program: of its real path).
    fn origin_of(&self, out: &ReqOut, map: &Map, i: usize) -> PathBuf {
        let o = &map.objs[i];
        let p = if o.is_main {
            &out.objects[o.obj].real
        } else {
            &out.objects[o.obj].path
        };
        p.parent().unwrap_or(Path::new("/")).to_path_buf()
    }

    /// Loads an object by path (a name with a slash, or the interpreter).
    fn load_path(&mut self, map: &Map, path: &Path, any_abi: bool) -> Result<Found, Fail> {
        let searched = vec![path.to_path_buf()];
        match self.candidate(map, path, any_abi) {
            Cand::Found(f) => Ok(f),
            Cand::Absent => Err(Fail {
                message: format!("{} not found", path.display()),
                searched,
            }),
            Cand::OtherAbi(abi) => Err(Fail {
                message: format!("{} is {abi}, not {}", path.display(), map.abi),
                searched,
            }),
            Cand::Bad(e) => Err(Fail {
                message: e,
                searched,
            }),
        }
    }

    /// The library search for a name without a slash.
    fn search(&mut self, map: &Map, name: &[u8], loader: Option<usize>) -> Result<Found, Fail> {
        let mut dirs: Vec<Dir> = Vec::new();
        let push = |dirs: &mut Vec<Dir>, list: &[Dir]| dirs.extend(list.iter().cloned());
        match map.flavor {
            Flavor::Glibc => {
                // DT_RPATH of the loader and of each object that loaded it,
                // unless the loader has DT_RUNPATH; then the program's.
                if loader.is_none_or(|l| map.objs[l].runpath.is_none()) {
                    let mut did_main = false;
                    let mut l = loader;
                    while let Some(li) = l {
                        if let Some(rp) = &map.objs[li].rpath {
                            push(&mut dirs, rp);
                            did_main |= map.objs[li].is_main;
                        }
                        l = map.objs[li].loader;
                    }
                    if let (false, Some(m)) = (did_main, map.main) {
                        if let Some(rp) = &map.objs[m].rpath {
                            push(&mut dirs, rp);
                        }
                    }
                }
                // DT_RUNPATH: the loader's own direct needs only.
                if let Some(rp) = loader.and_then(|l| map.objs[l].runpath.as_ref()) {
                    push(&mut dirs, rp);
                }
                let nodeflib = loader.or(map.main).is_some_and(|l| {
                    map.objs[l]
                        .elf
                        .dynamic
                        .as_ref()
                        .is_some_and(|d| d.flags_1 & DF_1_NODEFLIB != 0)
                });
                // At run time these come from /etc/ld.so.cache, not ld.so.conf;
                // the default directories are searched even without a cache.
                let conf = self.conf();
                for d in conf.iter() {
                    let default = map.env.defaults.contains(d);
                    if !(nodeflib && default) {
                        let cache = (!default).then(|| PathBuf::from(search::LD_SO_CACHE));
                        dirs.push(Dir {
                            config: cache,
                            ..Dir::plain(d)
                        });
                    }
                }
                if !nodeflib {
                    dirs.extend(map.env.defaults.iter().map(|d| Dir::plain(d)));
                }
            }
            Flavor::Musl => {
                let mut l = loader;
                while let Some(li) = l {
                    if let Some(rp) = &map.objs[li].rpath {
                        push(&mut dirs, rp);
                    }
                    l = map.objs[li].loader;
                }
                let mp = &map.musl_path;
                for d in &mp.dirs {
                    let default = search::MUSL_DEFAULT_PATH.iter().any(|x| Path::new(x) == d);
                    let file = mp.file.clone().filter(|_| !default);
                    dirs.push(Dir {
                        config: file,
                        ..Dir::plain(d)
                    });
                }
            }
        }
        let mut seen: HashSet<&Path> = HashSet::new();
        let mut other = Vec::new();
        let hwcaps = map.env.hwcaps.clone();
        let name_os = OsStr::from_bytes(name);
        for dir in &dirs {
            if !seen.insert(&dir.path) {
                continue;
            }
            let subdirs = hwcaps
                .iter()
                .map(|h| dir.path.join("glibc-hwcaps").join(h))
                .chain(std::iter::once(dir.path.clone()));
            for d in subdirs {
                match self.candidate(map, &d.join(name_os), false) {
                    Cand::Found(mut f) => {
                        f.config = dir.config.clone();
                        f.proc = dir.proc;
                        return Ok(f);
                    }
                    Cand::Absent => {}
                    Cand::OtherAbi(abi) => {
                        other.push(format!("{} ({abi})", d.join(name_os).display()))
                    }
                    Cand::Bad(e) => {
                        return Err(Fail {
                            message: e,
                            searched: dirs.iter().map(|d| d.path.clone()).collect(),
                        })
                    }
                }
            }
        }
        let mut searched = Vec::new();
        for d in dirs {
            if !searched.contains(&d.path) {
                searched.push(d.path);
            }
        }
        let mut message = format!("library {} not found", name_os.to_string_lossy());
        if !other.is_empty() {
            message.push_str(&format!(
                " (skipped, not {}: {})",
                map.abi,
                other.join(", ")
            ));
        }
        Err(Fail { message, searched })
    }

    fn candidate(&mut self, map: &Map, path: &Path, any_abi: bool) -> Cand {
        let Ok(walk) = self.sys.walk(path) else {
            return Cand::Absent;
        };
        let Node::File { dev, ino, .. } = walk.node else {
            return Cand::Absent;
        };
        match self.content(&walk.real) {
            Err(e) => Cand::Bad(e),
            Ok(c) => match &*c {
                Content::Elf(elf) => {
                    if !any_abi && !map.abi.accepts(&elf.abi) {
                        return Cand::OtherAbi(elf.abi);
                    }
                    Cand::Found(Found {
                        path: path.to_path_buf(),
                        walk,
                        elf: elf.clone(),
                        id: (dev, ino),
                        config: None,
                        proc: false,
                    })
                }
                _ => Cand::Bad(format!(
                    "{} is not an ELF object (the loader stops at an invalid ELF header)",
                    path.display()
                )),
            },
        }
    }
}

enum Cand {
    Found(Found),
    Absent,
    OtherAbi(Abi),
    Bad(String),
}

fn flavor_of(elf: &Elf) -> Flavor {
    let musl = elf.interp.as_ref().is_some_and(|i| {
        Path::new(OsStr::from_bytes(i))
            .file_name()
            .is_some_and(|n| n.as_bytes().starts_with(b"ld-musl-"))
    });
    if musl {
        Flavor::Musl
    } else {
        Flavor::Glibc
    }
}

/// Names musl answers with itself (its libc, libpthread, ... are one file).
fn musl_reserved(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b"lib") else {
        return false;
    };
    ["c.", "pthread.", "rt.", "m.", "dl.", "util.", "xnet."]
        .iter()
        .any(|r| rest.starts_with(r.as_bytes()))
}

/// Splits a `#!` line (after `#!`) into the interpreter and its optional
/// single argument, as the kernel does.
pub(crate) fn parse_shebang(line: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.trim_ascii();
    let end = line
        .iter()
        .position(|&b| b == b' ' || b == b'\t')
        .unwrap_or(line.len());
    let interp = &line[..end];
    if interp.is_empty() {
        return None;
    }
    let arg = line[end..].trim_ascii();
    Some((interp.to_vec(), (!arg.is_empty()).then(|| arg.to_vec())))
}

/// The command `env` runs for a `#!/usr/bin/env ARG` line: the first word
/// that is neither an option nor a `NAME=value` assignment (`-S` splits the
/// argument into words, as env does).
pub(crate) fn env_command(arg: &[u8]) -> Option<Vec<u8>> {
    let mut words = arg
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty());
    while let Some(w) = words.next() {
        if w == b"-u" || w == b"--unset" || w == b"-C" || w == b"--chdir" {
            words.next();
            continue;
        }
        if w.starts_with(b"-") || w.contains(&b'=') {
            continue;
        }
        return Some(w.to_vec());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_lines() {
        let s = |l: &str| {
            parse_shebang(l.as_bytes()).map(|(i, a)| {
                (
                    String::from_utf8(i).unwrap(),
                    a.map(|a| String::from_utf8(a).unwrap()),
                )
            })
        };
        assert_eq!(s("/bin/sh"), Some(("/bin/sh".into(), None)));
        assert_eq!(
            s(" /bin/bash -e \r"),
            Some(("/bin/bash".into(), Some("-e".into())))
        );
        assert_eq!(
            s("/usr/bin/env python3 -u"),
            Some(("/usr/bin/env".into(), Some("python3 -u".into())))
        );
        assert_eq!(s("   "), None);
    }

    #[test]
    fn env_commands() {
        let e = |a: &str| env_command(a.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(e("python3").as_deref(), Some("python3"));
        assert_eq!(e("-S python3 -u").as_deref(), Some("python3"));
        assert_eq!(e("-i LANG=C perl -w").as_deref(), Some("perl"));
        assert_eq!(e("-u HOME sh").as_deref(), Some("sh"));
        assert_eq!(e("-"), None);
    }

    #[test]
    fn musl_names() {
        assert!(musl_reserved(b"libc.so"));
        assert!(musl_reserved(b"libpthread.so.0"));
        assert!(!musl_reserved(b"libcrypto.so.3"));
        assert!(!musl_reserved(b"libmagic.so.1"));
    }
}
