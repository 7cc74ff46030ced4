//! No import circles between the library's files: a file never imports (through a chain of
//! other files) a file that imports it back. Each concept lives below its users.
//!
//! The checker reads every file under `src/`, builds the module tree from `mod NAME;` and
//! `mod NAME { .. }`, and draws an edge from a file to the file that is the *home* of what it
//! names: a `use crate::..`, `use super::..`, `use self::..` or a child module's path, and the
//! same paths written in code (`crate::port::iface_mac(..)`, `super::err(..)`, or through a
//! module a `use` brought in). A name is followed through re-exports (`pub use`) to the file that
//! defines it, so `crate::port::DropReason` leads to `stats/counters.rs`. A `pub use` is a
//! re-export, not an import, unless the file also uses the name itself. Comments and strings
//! are skipped (doc links are not imports). It then reports every strongly connected group of
//! files (Tarjan), with one circle through each and the names that make each step.
//!
//! `IMPORT_CYCLES_SRC=DIR cargo test -p linerate --test import_cycles -- --nocapture` checks
//! another source tree (another commit's `src/`); `IMPORT_CYCLES_EDGES=1` prints every edge
//! with the name that makes it.
#![deny(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Replaces comments, string and character literals with spaces (lines kept).
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied().unwrap_or('\0');
        if c == '/' && next == '/' {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == '*' {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                    continue;
                }
                if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                    continue;
                }
                blank(&mut out, b[i]);
                i += 1;
            }
        } else if (c == 'r' || (c == 'b' && next == 'r'))
            && !prev_ident(&b, i)
            && raw_start(&b, i + usize::from(c == 'b') + 1).is_some()
        {
            let start = i + usize::from(c == 'b') + 1;
            let hashes = raw_start(&b, start).unwrap();
            i = start + hashes + 1;
            while i < b.len() {
                if b[i] == '"' && (0..hashes).all(|k| b.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                blank(&mut out, b[i]);
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' && (next == '\\' || b.get(i + 2) == Some(&'\'')) {
            // A character literal ('a', '\n', '\u{..}'); otherwise a lifetime.
            i += 1;
            while i < b.len() && b[i] != '\'' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_ident(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// At `i` (after `r`): `#`* then `"` opens a raw string; the number of `#`.
fn raw_start(b: &[char], i: usize) -> Option<usize> {
    let mut k = 0;
    while b.get(i + k) == Some(&'#') {
        k += 1;
    }
    (b.get(i + k) == Some(&'"')).then_some(k)
}

#[derive(Clone, Debug, PartialEq)]
struct Tok {
    s: String,
    line: usize,
}

fn tokens(code: &str) -> Vec<Tok> {
    let mut v = Vec::new();
    for (n, l) in code.lines().enumerate() {
        let c: Vec<char> = l.chars().collect();
        let mut i = 0;
        while i < c.len() {
            if c[i].is_alphanumeric() || c[i] == '_' {
                let s = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                v.push(Tok {
                    s: c[s..i].iter().collect(),
                    line: n + 1,
                });
            } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
                v.push(Tok {
                    s: "::".into(),
                    line: n + 1,
                });
                i += 2;
            } else if !c[i].is_whitespace() {
                v.push(Tok {
                    s: c[i].to_string(),
                    line: n + 1,
                });
                i += 1;
            } else {
                i += 1;
            }
        }
    }
    v
}

type ModPath = Vec<String>;

/// One `use` binding: `name` in module `at` stands for `path` (as written, relative to `at`).
#[derive(Clone, Debug)]
struct Binding {
    path: Vec<String>,
    public: bool,
    line: usize,
}

#[derive(Default, Debug)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    /// Names bound by `use` (the last segment or its `as` rename).
    uses: BTreeMap<String, Binding>,
    /// `use PATH::*`.
    globs: Vec<Binding>,
    /// Names of items declared in the module.
    items: BTreeSet<String>,
}

/// A path written in code, outside `use` lines: its segments, module, line.
struct CodePath {
    segs: Vec<String>,
    at: ModPath,
    line: usize,
}

#[derive(Default)]
struct Crate {
    root: PathBuf,
    mods: BTreeMap<ModPath, Module>,
    code_paths: Vec<(PathBuf, CodePath)>,
    /// Identifiers written in each file outside `use` declarations.
    idents: HashMap<PathBuf, BTreeSet<String>>,
}

impl Crate {
    fn load(root: &Path) -> Crate {
        let mut c = Crate {
            root: root.to_path_buf(),
            ..Default::default()
        };
        c.parse_file(&root.join("lib.rs"), vec![], root);
        c
    }

    /// Parses `file`, module `at`, whose file children live in `dir`.
    fn parse_file(&mut self, file: &Path, at: ModPath, dir: &Path) {
        let src = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let t = tokens(&strip(&src));
        self.mods.entry(at.clone()).or_default().file = file.to_path_buf();
        // (module, its directory, brace depth at which it closes)
        let mut stack: Vec<(ModPath, PathBuf, usize)> = vec![(at, dir.to_path_buf(), 0)];
        let mut depth = 0usize;
        let mut idents = BTreeSet::new();
        let mut i = 0;
        let mut pending_files = Vec::new();
        while i < t.len() {
            let (cur, cur_dir, _) = stack.last().unwrap().clone();
            let s = t[i].s.as_str();
            match s {
                "{" => depth += 1,
                "}" => {
                    depth = depth.saturating_sub(1);
                    if stack.len() > 1 && stack.last().unwrap().2 == depth {
                        stack.pop();
                    }
                }
                "mod" if t.get(i + 1).is_some_and(|n| is_ident(&n.s)) => {
                    if cfg_test(&t, i) {
                        // Test code is not the library's structure: skip the module.
                        match t.get(i + 2).map(|x| x.s.as_str()) {
                            Some("{") => {
                                let inner = inner_group(&t, &t[i + 2]);
                                i += 2 + inner.len() + 2;
                            }
                            _ => i += 3,
                        }
                        continue;
                    }
                    let name = t[i + 1].s.clone();
                    let mut child = cur.clone();
                    child.push(name.clone());
                    self.mods
                        .get_mut(&cur)
                        .unwrap()
                        .children
                        .insert(name.clone());
                    match t.get(i + 2).map(|x| x.s.as_str()) {
                        Some(";") => {
                            let (f, d) = if cur_dir.join(format!("{name}.rs")).exists() {
                                (cur_dir.join(format!("{name}.rs")), cur_dir.join(&name))
                            } else {
                                (cur_dir.join(&name).join("mod.rs"), cur_dir.join(&name))
                            };
                            pending_files.push((f, child, d));
                            i += 3;
                            continue;
                        }
                        Some("{") => {
                            self.mods.entry(child.clone()).or_default().file = file.to_path_buf();
                            stack.push((child, cur_dir.join(&name), depth));
                            depth += 1;
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
                "use" if i == 0 || !matches!(t[i - 1].s.as_str(), "::" | "$") => {
                    let public = is_public(&t, i);
                    let end = (i..t.len()).find(|&k| t[k].s == ";").unwrap_or(t.len());
                    let m = self.mods.get_mut(&cur).unwrap();
                    parse_tree(&t[i + 1..end], &[], public, m);
                    i = end + 1;
                    continue;
                }
                "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "union" => {
                    if let Some(n) = t.get(i + 1).filter(|n| is_ident(&n.s)) {
                        self.mods.get_mut(&cur).unwrap().items.insert(n.s.clone());
                    }
                }
                _ if is_ident(s) => {
                    idents.insert(s.to_string());
                    let starts = i == 0 || t[i - 1].s != "::";
                    if starts && t.get(i + 1).is_some_and(|x| x.s == "::") {
                        let mut segs = vec![s.to_string()];
                        let mut k = i + 1;
                        while t.get(k).is_some_and(|x| x.s == "::")
                            && t.get(k + 1).is_some_and(|x| is_ident(&x.s))
                        {
                            segs.push(t[k + 1].s.clone());
                            k += 2;
                        }
                        self.code_paths.push((
                            file.to_path_buf(),
                            CodePath {
                                segs,
                                at: cur.clone(),
                                line: t[i].line,
                            },
                        ));
                    }
                }
                _ => {}
            }
            i += 1;
        }
        self.idents.insert(file.to_path_buf(), idents);
        for (f, m, d) in pending_files {
            self.parse_file(&f, m, &d);
        }
    }

    /// The absolute module path a path's first segment starts from, and the segments left;
    /// None: not the crate's (std, another crate, a local name).
    fn anchor(&self, at: &ModPath, segs: &[String], depth: usize) -> Option<Vec<String>> {
        let mut base = at.clone();
        let mut rest = segs;
        match segs.first()?.as_str() {
            "crate" => {
                base.clear();
                rest = &segs[1..];
            }
            "self" => rest = &segs[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                if rest.first().is_some_and(|s| s == "self") {
                    rest = &rest[1..];
                }
            }
            first => {
                let m = self.mods.get(at)?;
                if m.children.contains(first) {
                } else if let Some(b) = m.uses.get(first) {
                    if depth > 16 {
                        return None;
                    }
                    let mut p = self.anchor(at, &b.path, depth + 1)?;
                    p.extend_from_slice(&segs[1..]);
                    return Some(p);
                } else {
                    return None;
                }
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file that is the home of absolute path `p` (a module's file, or the file that
    /// defines the item, through re-exports); whether it is a module.
    fn home(&self, p: &[String], depth: usize) -> Option<(PathBuf, bool)> {
        let mut m: ModPath = vec![];
        for (k, seg) in p.iter().enumerate() {
            let module = self.mods.get(&m)?;
            if module.children.contains(seg) {
                m.push(seg.clone());
                continue;
            }
            if depth > 16 {
                return Some((module.file.clone(), false));
            }
            // An item: through a `use` binding of this module, or a glob that has it.
            if !module.items.contains(seg) {
                if let Some(b) = module.uses.get(seg) {
                    let mut q = self.anchor(&m, &b.path, depth + 1)?;
                    q.extend_from_slice(&p[k + 1..]);
                    return self.home(&q, depth + 1);
                }
                for g in &module.globs {
                    let Some(mut q) = self.anchor(&m, &g.path, depth + 1) else {
                        continue;
                    };
                    if let Some(gm) = self.mods.get(&q) {
                        if gm.items.contains(seg) || gm.uses.contains_key(seg) {
                            q.extend_from_slice(&p[k..]);
                            return self.home(&q, depth + 1);
                        }
                    }
                }
            }
            return Some((module.file.clone(), false));
        }
        Some((self.mods.get(&m)?.file.clone(), true))
    }

    fn rel(&self, f: &Path) -> String {
        f.strip_prefix(&self.root)
            .unwrap_or(f)
            .display()
            .to_string()
    }

    /// Edges file -> file, each with why (the first name and line that makes it).
    fn edges(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut e: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut add = |from: &Path, to: &Path, why: String| {
            let (a, b) = (self.rel(from), self.rel(to));
            if a != b {
                e.entry(a).or_default().entry(b).or_insert(why);
            }
        };
        for (mp, m) in &self.mods {
            let used = &self.idents[&m.file];
            for (name, b) in &m.uses {
                if b.public && !used.contains(name) {
                    continue; // a re-export only
                }
                let Some(abs) = self.anchor(mp, &b.path, 0) else {
                    continue;
                };
                if let Some((to, false)) = self.home(&abs, 0) {
                    add(
                        &m.file,
                        &to,
                        format!("{} (line {})", b.path.join("::"), b.line),
                    );
                }
            }
            for g in &m.globs {
                let Some(abs) = self.anchor(mp, &g.path, 0) else {
                    continue;
                };
                if let Some((to, _)) = self.home(&abs, 0) {
                    add(
                        &m.file,
                        &to,
                        format!("{}::* (line {})", g.path.join("::"), g.line),
                    );
                }
            }
        }
        for (file, cp) in &self.code_paths {
            let Some(abs) = self.anchor(&cp.at, &cp.segs, 0) else {
                continue;
            };
            if let Some((to, _)) = self.home(&abs, 0) {
                add(
                    file,
                    &to,
                    format!("{} (line {})", cp.segs.join("::"), cp.line),
                );
            }
        }
        e
    }
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Whether the item at `i` (after its visibility) is under `#[cfg(..test..)]`.
fn cfg_test(t: &[Tok], i: usize) -> bool {
    let mut k = i;
    // Skip `pub`, `pub(crate)`.
    while k > 0 && matches!(t[k - 1].s.as_str(), "pub" | ")" | "crate" | "super" | "(") {
        k -= 1;
    }
    // Walk back over attributes `#[...]`.
    while k > 0 && t[k - 1].s == "]" {
        let Some(open) = (0..k - 1).rev().find(|&j| t[j].s == "#") else {
            return false;
        };
        let attr = &t[open..k];
        if attr.get(2).is_some_and(|x| x.s == "cfg") && attr.iter().any(|x| x.s == "test") {
            return true;
        }
        k = open;
    }
    false
}

/// Whether the `use` at `i` is `pub` / `pub(..)`.
fn is_public(t: &[Tok], i: usize) -> bool {
    if i >= 1 && t[i - 1].s == "pub" {
        return true;
    }
    if i >= 1 && t[i - 1].s == ")" {
        if let Some(k) = (0..i).rev().find(|&k| t[k].s == "(") {
            return k >= 1 && t[k - 1].s == "pub";
        }
    }
    false
}

/// Parses a use tree (tokens after `use`, before `;`) into `m`'s bindings.
fn parse_tree(t: &[Tok], prefix: &[String], public: bool, m: &mut Module) {
    // Split at top-level commas.
    let mut parts = vec![];
    let (mut depth, mut start) = (0, 0);
    for (k, x) in t.iter().enumerate() {
        match x.s.as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            "," if depth == 0 => {
                parts.push(&t[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&t[start..]);
    for p in parts {
        let p: Vec<&Tok> = p.iter().filter(|x| x.s != "::").collect();
        if p.is_empty() {
            continue;
        }
        let mut path = prefix.to_vec();
        let mut k = 0;
        while k < p.len() {
            let s = p[k].s.as_str();
            if s == "{" {
                // The original tokens between this brace and its match.
                let inner = inner_group(t, p[k]);
                parse_tree(inner, &path, public, m);
                break;
            }
            if s == "*" {
                m.globs.push(Binding {
                    path: path.clone(),
                    public,
                    line: p[k].line,
                });
                break;
            }
            if s == "as" {
                if let Some(alias) = p.get(k + 1) {
                    bind(m, &alias.s, &path, public, p[k].line);
                }
                break;
            }
            path.push(s.to_string());
            if k + 1 == p.len() {
                let name = if s == "self" {
                    path.pop();
                    path.last().cloned().unwrap_or_default()
                } else {
                    s.to_string()
                };
                bind(m, &name, &path, public, p[k].line);
            }
            k += 1;
        }
    }
}

fn bind(m: &mut Module, name: &str, path: &[String], public: bool, line: usize) {
    if name == "_" || path.is_empty() {
        return;
    }
    m.uses.insert(
        name.to_string(),
        Binding {
            path: path.to_vec(),
            public,
            line,
        },
    );
}

/// The tokens inside the brace group that `open` starts.
fn inner_group<'a>(t: &'a [Tok], open: &Tok) -> &'a [Tok] {
    let s = t.iter().position(|x| std::ptr::eq(x, open)).unwrap();
    let mut depth = 0;
    for k in s..t.len() {
        match t[k].s.as_str() {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if depth == 0 {
                    return &t[s + 1..k];
                }
            }
            _ => {}
        }
    }
    &t[s + 1..]
}

/// Every group of files that import each other (more than one file), each with one circle
/// through it, spelled `a.rs -> b.rs (why) -> ... -> a.rs`.
fn circles(e: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<String> {
    // Tarjan's strongly connected components.
    struct T<'a> {
        e: &'a BTreeMap<String, BTreeMap<String, String>>,
        idx: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        on: BTreeSet<&'a str>,
        st: Vec<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.idx.len();
        t.idx.insert(v, n);
        t.low.insert(v, n);
        t.st.push(v);
        t.on.insert(v);
        if let Some(next) = t.e.get(v) {
            for w in next.keys() {
                let w = w.as_str();
                if !t.idx.contains_key(w) {
                    visit(t, w);
                    let l = t.low[v].min(t.low[w]);
                    t.low.insert(v, l);
                } else if t.on.contains(w) {
                    let l = t.low[v].min(t.idx[w]);
                    t.low.insert(v, l);
                }
            }
        }
        if t.low[v] == t.idx[v] {
            let mut c = vec![];
            while let Some(w) = t.st.pop() {
                t.on.remove(w);
                c.push(w);
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                t.out.push(c);
            }
        }
    }
    let mut t = T {
        e,
        idx: HashMap::new(),
        low: HashMap::new(),
        on: BTreeSet::new(),
        st: vec![],
        out: vec![],
    };
    for v in e.keys() {
        if !t.idx.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
        .iter()
        .map(|group| {
            // A shortest circle from the group's first file back to it (breadth first).
            let set: BTreeSet<&str> = group.iter().copied().collect();
            let start = *group.iter().min().unwrap();
            let mut prev: HashMap<&str, &str> = HashMap::new();
            let mut q = std::collections::VecDeque::from([start]);
            let mut back = None;
            while let Some(v) = q.pop_front() {
                for w in e[v].keys().map(|w| w.as_str()).filter(|w| set.contains(w)) {
                    if w == start {
                        back = Some(v);
                        break;
                    }
                    if !prev.contains_key(w) {
                        prev.insert(w, v);
                        q.push_back(w);
                    }
                }
                if back.is_some() {
                    break;
                }
            }
            let mut path = vec![start];
            let mut v = back.unwrap();
            while v != start {
                path.push(v);
                v = prev[v];
            }
            path[1..].reverse();
            path.push(start);
            let mut s = format!("{} files [{}]: {start}", group.len(), {
                let mut g = group.clone();
                g.sort();
                g.join(", ")
            });
            for w in path.windows(2) {
                s += &format!(" -> {} ({})", w[1], e[w[0]][w[1]]);
            }
            s
        })
        .collect()
}

fn check(src: &Path) -> (usize, usize, Vec<String>) {
    let c = Crate::load(src);
    let e = c.edges();
    if std::env::var_os("IMPORT_CYCLES_EDGES").is_some() {
        for (a, to) in &e {
            for (b, why) in to {
                println!("edge: {a} -> {b} ({why})");
            }
        }
    }
    let files: BTreeSet<&PathBuf> = c.mods.values().map(|m| &m.file).collect();
    let edges = e.values().map(|m| m.len()).sum();
    (files.len(), edges, circles(&e))
}

#[test]
fn no_import_circles_in_the_library() {
    let src = std::env::var_os("IMPORT_CYCLES_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let (files, edges, found) = check(&src);
    println!(
        "import circles: {} ({files} files, {edges} file-to-file imports)",
        found.len()
    );
    for c in &found {
        println!("circle: {c}");
    }
    assert!(files > 50, "the checker read only {files} files of {src:?}");
    assert!(edges > files, "the checker found only {edges} imports");
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_finds_a_circle_through_a_re_export_and_a_code_path() {
    let dir = std::env::temp_dir().join(format!("import-cycles-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("port")).unwrap();
    let w = |f: &str, s: &str| std::fs::write(dir.join(f), s).unwrap();
    w(
        "lib.rs",
        "pub mod os;\npub mod port;\nmod stats;\n#[cfg(test)]\nmod tests { use crate::os::euid; }\n",
    );
    // os.rs -> port/mod.rs (a code path) -> port/pcap.rs (use) -> os.rs (a code path).
    w(
        "os.rs",
        "/// [`crate::stats::X`] (a doc link: no import)\npub fn mac() -> u8 { crate::port::mac() }\npub fn euid() -> u32 { 0 }\n",
    );
    w(
        "port/mod.rs",
        "pub mod pcap;\npub use crate::stats::Counters;\nuse pcap::open;\npub fn mac() -> u8 { let _ = \"crate::stats::y\"; open() }\n",
    );
    w(
        "port/pcap.rs",
        "pub fn open() -> u8 { if crate::os::euid() == 0 { 1 } else { 0 } }\n#[cfg(all(test, not(loom)))]\nmod t { fn f() { crate::stats::g() } }\n",
    );
    // stats.rs imports what port re-exports, and port never uses it: no circle.
    w(
        "stats.rs",
        "use crate::port::pcap as p;\npub struct Counters;\nfn f() { let _ = p::open(); }\n",
    );
    let c = Crate::load(&dir);
    let e = c.edges();
    let found = circles(&e);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{found:?} {e:?}");
    assert!(
        found[0].starts_with("3 files [os.rs, port/mod.rs, port/pcap.rs]: os.rs -> port/mod.rs"),
        "{}",
        found[0]
    );
    assert!(!e["port/mod.rs"].contains_key("stats.rs"), "{e:?}");
    assert!(e["stats.rs"].contains_key("port/pcap.rs"), "{e:?}");
    assert!(!e.get("os.rs").unwrap().contains_key("stats.rs"), "{e:?}");
    // Test modules are not the library's structure.
    assert!(!e.contains_key("lib.rs"), "{e:?}");
    assert!(!e["port/pcap.rs"].contains_key("stats.rs"), "{e:?}");
}

#[test]
fn comments_strings_and_lifetimes_are_stripped_exactly() {
    let s = strip("a // c\nb /* x /* y */ z */ c \"s\\\"t\" 'x' '\\n' &'a T r#\"q\"# d");
    assert_eq!(s.lines().count(), 2);
    let t: Vec<String> = tokens(&s).into_iter().map(|t| t.s).collect();
    assert_eq!(t, ["a", "b", "c", "&", "'", "a", "T", "d"]);
}
