//! modprobe's configuration: `modprobe.d` files of the source root and the
//! module directory's `modules.softdep` / `modules.weakdep`, read in
//! libkmod's order (every file sorted by its name, the first of a name
//! wins) with libkmod's syntax.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::names::normalize_alias;
use crate::resolve::root::Root;

/// Where a configuration line is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfLine {
    pub file: String,
    pub line: u32,
}

impl std::fmt::Display for ConfLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alias {
    pub pattern: String,
    pub module: String,
    pub at: ConfLine,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Softdep {
    pub pattern: String,
    pub pre: Vec<String>,
    pub post: Vec<String>,
    pub at: ConfLine,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Weakdep {
    pub pattern: String,
    pub weak: Vec<String>,
    pub at: ConfLine,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub pattern: String,
    pub command: String,
    pub at: ConfLine,
}

/// Everything modprobe reads besides the indexes.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub aliases: Vec<Alias>,
    pub blacklist: Vec<(String, ConfLine)>,
    pub softdeps: Vec<Softdep>,
    pub weakdeps: Vec<Weakdep>,
    pub install: Vec<Command>,
    pub remove: Vec<Command>,
    pub options: Vec<(String, String, ConfLine)>,
    /// The files read, in order (paths inside the root).
    pub files: Vec<String>,
}

/// libkmod's directories, in precedence order (a file name met again in a
/// later directory is ignored).
pub const CONFIG_DIRS: [&str; 5] = [
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/lib/modprobe.d",
    "/usr/lib/modprobe.d",
];

fn underscores(s: &str) -> String {
    normalize_alias(s).unwrap_or_else(|| s.to_string())
}

impl Config {
    /// Reads the root's `modprobe.d` directories, plus `extra` files (name
    /// as shown, name used for ordering, text), all sorted together by name.
    pub fn load(root: &Root, extra: Vec<(String, String, String)>) -> Config {
        // name -> (shown path, text)
        let mut files: BTreeMap<String, (String, String)> = BTreeMap::new();
        for dir in CONFIG_DIRS {
            let Ok(host) = root.resolve(Path::new(dir), true) else {
                continue;
            };
            let Ok(rd) = std::fs::read_dir(&host) else {
                continue;
            };
            let mut names: Vec<(String, PathBuf)> = rd
                .flatten()
                .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
                .filter(|(n, _)| {
                    !n.starts_with('.') && (n.ends_with(".conf") || n.ends_with(".alias"))
                })
                .collect();
            names.sort();
            for (name, path) in names {
                if files.contains_key(&name) || path.is_dir() {
                    continue;
                }
                if let Ok(text) = std::fs::read_to_string(&path) {
                    files.insert(name.clone(), (format!("{dir}/{name}"), text));
                }
            }
        }
        for (shown, name, text) in extra {
            files.entry(name).or_insert((shown, text));
        }
        let mut c = Config::default();
        for (_, (shown, text)) in files {
            c.parse(&text, &shown);
            c.files.push(shown);
        }
        c
    }

    /// Parses one file's text into this configuration.
    pub fn parse(&mut self, text: &str, file: &str) {
        let mut lineno = 0u32;
        let mut lines = text.split('\n').peekable();
        while let Some(first) = lines.next() {
            lineno += 1;
            let start = lineno;
            // Backslash-newline joins lines.
            let mut line = first.to_string();
            while line.ends_with('\\') {
                line.pop();
                match lines.next() {
                    Some(next) => {
                        lineno += 1;
                        line.push_str(next);
                    }
                    None => break,
                }
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = ConfLine {
                file: file.to_string(),
                line: start,
            };
            let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
            let Some(cmd) = words.next() else { continue };
            // The remainder after the command and its first argument.
            let rest_after = |n: usize| -> Option<String> {
                let mut s = line.trim_start_matches([' ', '\t']);
                for _ in 0..n {
                    let end = s.find([' ', '\t'])?;
                    s = s[end..].trim_start_matches([' ', '\t']);
                }
                (!s.is_empty()).then(|| s.to_string())
            };
            match cmd {
                "alias" => {
                    if let (Some(a), Some(m)) = (words.next(), words.next()) {
                        self.aliases.push(Alias {
                            pattern: underscores(a),
                            module: underscores(m),
                            at,
                        });
                    }
                }
                "blacklist" => {
                    if let Some(m) = words.next() {
                        self.blacklist.push((underscores(m), at));
                    }
                }
                "options" => {
                    if let (Some(m), Some(opts)) = (words.next(), rest_after(2)) {
                        self.options.push((underscores(m), opts, at));
                    }
                }
                "install" | "remove" => {
                    if let (Some(m), Some(command)) = (words.next(), rest_after(2)) {
                        let c = Command {
                            pattern: underscores(m),
                            command,
                            at,
                        };
                        if cmd == "install" {
                            self.install.push(c);
                        } else {
                            self.remove.push(c);
                        }
                    }
                }
                "softdep" => {
                    let Some(m) = words.next() else { continue };
                    if rest_after(2).is_none() {
                        continue;
                    }
                    let (mut pre, mut post) = (Vec::new(), Vec::new());
                    let mut mode = 0;
                    for w in words {
                        match w {
                            "pre:" => mode = 1,
                            "post:" => mode = 2,
                            _ if mode == 1 => pre.push(w.to_string()),
                            _ if mode == 2 => post.push(w.to_string()),
                            _ => {}
                        }
                    }
                    self.softdeps.push(Softdep {
                        pattern: underscores(m),
                        pre,
                        post,
                        at,
                    });
                }
                "weakdep" => {
                    let Some(m) = words.next() else { continue };
                    let weak: Vec<String> = words.map(str::to_string).collect();
                    if weak.is_empty() {
                        continue;
                    }
                    self.weakdeps.push(Weakdep {
                        pattern: underscores(m),
                        weak,
                        at,
                    });
                }
                _ => {}
            }
        }
    }

    /// The first softdep line whose pattern matches `module` (libkmod uses
    /// only that one).
    pub fn softdep(&self, module: &str) -> Option<&Softdep> {
        self.softdeps
            .iter()
            .find(|s| super::index::fnmatch(s.pattern.as_bytes(), module.as_bytes()))
    }

    pub fn weakdep(&self, module: &str) -> Option<&Weakdep> {
        self.weakdeps
            .iter()
            .find(|s| super::index::fnmatch(s.pattern.as_bytes(), module.as_bytes()))
    }

    pub fn install_command(&self, module: &str) -> Option<&Command> {
        self.install
            .iter()
            .find(|s| super::index::fnmatch(s.pattern.as_bytes(), module.as_bytes()))
    }

    pub fn blacklisted(&self, module: &str) -> Option<&ConfLine> {
        self.blacklist
            .iter()
            .find(|(m, _)| m == module)
            .map(|(_, at)| at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_libkmod_syntax() {
        let mut c = Config::default();
        c.parse(
            "# comment\n\
             alias  fs-foo   foo-bar\n\
             blacklist pcspkr\n\
             options snd-pcsp index=-2 \\\n  enable=1\n\
             softdep ext4 pre: crc32c post: zz\n\
             softdep cifs gcm\n\
             softdep ext4 pre: other\n\
             weakdep xe i915\n\
             install foo /bin/true\n\
             bogus line\n",
            "test.conf",
        );
        assert_eq!(c.aliases[0].pattern, "fs_foo");
        assert_eq!(c.aliases[0].module, "foo_bar");
        assert_eq!(c.blacklisted("pcspkr").map(|a| a.line), Some(3));
        assert_eq!(c.options[0].1, "index=-2   enable=1");
        let s = c.softdep("ext4").unwrap();
        assert_eq!(
            (s.pre.clone(), s.post.clone(), s.at.line),
            (vec!["crc32c".to_string()], vec!["zz".to_string()], 6)
        );
        assert!(
            c.softdep("cifs").unwrap().pre.is_empty(),
            "first match wins, even when empty"
        );
        assert_eq!(c.weakdep("xe").unwrap().weak, ["i915"]);
        assert_eq!(c.install_command("foo").unwrap().command, "/bin/true");
    }

    #[test]
    fn files_sort_by_name_across_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("etc/modprobe.d")).unwrap();
        std::fs::create_dir_all(r.join("lib/modprobe.d")).unwrap();
        std::fs::write(
            r.join("etc/modprobe.d/zz.conf"),
            "softdep ext4 pre: from-zz\n",
        )
        .unwrap();
        std::fs::write(
            r.join("lib/modprobe.d/aa.conf"),
            "softdep ext4 pre: from-aa\n",
        )
        .unwrap();
        std::fs::write(
            r.join("lib/modprobe.d/zz.conf"),
            "softdep ext4 pre: shadowed\n",
        )
        .unwrap();
        std::fs::write(
            r.join("lib/modprobe.d/notes.txt"),
            "softdep ext4 pre: ignored\n",
        )
        .unwrap();
        let c = Config::load(
            &Root::new(r),
            vec![(
                "/lib/modules/v/modules.softdep".into(),
                "modules.softdep".into(),
                "softdep ext4 pre: from-depmod\n".into(),
            )],
        );
        let pres: Vec<&str> = c.softdeps.iter().map(|s| s.pre[0].as_str()).collect();
        assert_eq!(pres, ["from-aa", "from-depmod", "from-zz"]);
        assert_eq!(c.files.len(), 3);
    }
}
