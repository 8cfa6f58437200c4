//! The layering rule: within each crate of the workspace, no file imports
//! a file that (directly or through others) imports it back. Dependencies
//! between modules run one way only.
//!
//! Every `crate::` and `super::` path in a file is resolved to the file
//! that defines the item (following `pub use` re-exports), giving an edge
//! from the user to the definer; a module re-exporting its own children
//! (`pub use child::Item`, a facade) is not an edge. The graph must have no
//! cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module path inside a crate: `[]` for the root, `["cast", "file"]`.
type ModPath = Vec<String>;

/// A crate's modules: path to file text.
struct Crate {
    files: BTreeMap<ModPath, String>,
}

impl Crate {
    fn load(src: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path.strip_prefix(src).unwrap();
                    let mut parts: Vec<String> = rel
                        .iter()
                        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
                        .collect();
                    if matches!(
                        parts.last().map(String::as_str),
                        Some("mod" | "lib" | "main")
                    ) {
                        parts.pop();
                    }
                    files.insert(parts, strip_comments(&fs::read_to_string(&path).unwrap()));
                }
            }
        }
        Crate { files }
    }

    /// Item name -> the path it re-exports, for a module's `pub use`s.
    fn reexports(&self, module: &ModPath) -> Vec<(String, ModPath)> {
        let Some(text) = self.files.get(module) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for stmt in statements(text, "pub use ")
            .into_iter()
            .chain(statements(text, "pub(crate) use "))
        {
            for path in use_tree(&stmt) {
                let Some(name) = path.last().cloned() else {
                    continue;
                };
                if let Some(target) = self.absolute_use(module, &path) {
                    out.push((name, target));
                }
            }
        }
        out
    }

    /// A `use` path made absolute: as [`absolute`], and a path starting
    /// with a child module's name is relative to `module` (2018 paths).
    fn absolute_use(&self, module: &ModPath, path: &[String]) -> Option<ModPath> {
        if let Some(abs) = absolute(module, path) {
            return Some(abs);
        }
        let mut child = module.clone();
        child.push(path.first()?.clone());
        if self.files.contains_key(&child) {
            child.extend(path[1..].iter().cloned());
            return Some(child);
        }
        None
    }

    /// The file (module) that defines what `path` names, following re-exports.
    fn resolve(&self, path: &ModPath, depth: usize) -> Option<ModPath> {
        if depth > 16 {
            return None;
        }
        // The longest prefix that is a module.
        let mut n = path.len();
        while n > 0 && !self.files.contains_key(&path[..n]) {
            n -= 1;
        }
        let module = path[..n].to_vec();
        if n == path.len() {
            return Some(module);
        }
        let item = &path[n];
        for (name, target) in self.reexports(&module) {
            if &name == item && target != *path {
                return self.resolve(&target, depth + 1).or(Some(module.clone()));
            }
        }
        Some(module)
    }
}

/// Removes `//` comments (doc comments hold example paths) and string
/// literals' contents.
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text of every statement starting with `start` (to its `;`).
fn statements(text: &str, start: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(start) {
        let after = &rest[i + start.len()..];
        let end = after.find(';').unwrap_or(after.len());
        out.push(after[..end].to_string());
        rest = &after[end..];
    }
    out
}

/// The leaf paths of a use tree: `a::{b, c::{d, e}}` gives `a::b`,
/// `a::c::d`, `a::c::e`.
fn use_tree(text: &str) -> Vec<Vec<String>> {
    fn parse(chars: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        let mut ident = String::new();
        while *i < chars.len() {
            let c = chars[*i];
            match c {
                '{' => {
                    *i += 1;
                    loop {
                        parse(chars, i, &path, out);
                        if *i >= chars.len() || chars[*i] == '}' {
                            break;
                        }
                        *i += 1; // the comma
                    }
                    *i += 1;
                    return;
                }
                ',' | '}' => break,
                ':' => {
                    if !ident.is_empty() {
                        path.push(std::mem::take(&mut ident));
                    }
                    *i += 1;
                    continue;
                }
                c if c.is_alphanumeric() || c == '_' => ident.push(c),
                _ => {
                    // `as` renames and whitespace end an identifier.
                    if !ident.is_empty() && c.is_whitespace() {
                        let rest: String = chars[*i..].iter().collect();
                        if rest.trim_start().starts_with("as ") {
                            path.push(std::mem::take(&mut ident));
                            out.push(path.clone());
                            while *i < chars.len() && chars[*i] != ',' && chars[*i] != '}' {
                                *i += 1;
                            }
                            return;
                        }
                    }
                }
            }
            *i += 1;
        }
        if !ident.is_empty() {
            path.push(ident);
        }
        if path.len() > prefix.len() || !path.is_empty() {
            out.push(path);
        }
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    parse(&chars, &mut i, &[], &mut out);
    out.retain(|p| p.last().is_some_and(|l| l != "self" && l != "*"));
    out
}

/// A path relative to `module` (`crate::`, `super::`, `self::` or a child)
/// made absolute; `None` for other crates' paths.
fn absolute(module: &ModPath, path: &[String]) -> Option<ModPath> {
    let first = path.first()?;
    let mut base: ModPath = match first.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => module.clone(),
        _ => return None,
    };
    let mut rest = &path[1..];
    if first == "super" {
        base.pop();
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Every path a file refers to through `crate::`, `super::` or `self::`.
fn references(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for stmt in statements(text, "use ") {
        out.extend(use_tree(&stmt));
    }
    // Inline paths: `crate::a::b::Item` in expressions and types.
    for start in ["crate::", "super::"] {
        let mut rest = text;
        while let Some(i) = rest.find(start) {
            let before = rest[..i].chars().last();
            let tail = &rest[i..];
            rest = &rest[i + start.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
                continue;
            }
            let path: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let segments: Vec<String> = path
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            out.push(segments);
        }
    }
    out
}

/// The import graph of a crate: module -> the modules it uses.
fn graph(krate: &Crate) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (module, text) in &krate.files {
        let facade: BTreeSet<ModPath> = statements(text, "pub use ")
            .iter()
            .flat_map(|s| use_tree(s))
            .filter_map(|p| krate.absolute_use(module, &p))
            .collect();
        let entry = edges.entry(module.clone()).or_default();
        for path in references(text) {
            let Some(abs) = krate.absolute_use(module, &path) else {
                continue;
            };
            let Some(target) = krate.resolve(&abs, 0) else {
                continue;
            };
            if &target == module || target.is_empty() && !krate.files.contains_key(&abs) {
                continue;
            }
            // A module re-exporting its descendants is a facade, not a use.
            if target.starts_with(module) && facade.contains(&abs) {
                continue;
            }
            entry.insert(target);
        }
    }
    edges
}

/// A cycle in the graph, if there is one.
fn find_cycle(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Option<Vec<ModPath>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &ModPath,
        edges: &BTreeMap<ModPath, BTreeSet<ModPath>>,
        marks: &mut BTreeMap<ModPath, Mark>,
        stack: &mut Vec<ModPath>,
    ) -> Option<Vec<ModPath>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let at = stack.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = stack[at..].to_vec();
                cycle.push(node.clone());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, marks, stack) {
                return Some(c);
            }
        }
        stack.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in edges.keys() {
        if let Some(c) = visit(node, edges, &mut marks, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

fn name(m: &ModPath) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("::")
    }
}

fn crates() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out: Vec<PathBuf> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    // The Python package's extension module is a crate of the workspace too.
    out.push(root.join("..").join("python").join("src"));
    out.sort();
    out
}

#[test]
fn no_crate_has_an_import_cycle() {
    let mut checked = 0;
    let mut cycles = Vec::new();
    for src in crates() {
        let krate = Crate::load(&src);
        let edges = graph(&krate);
        if let Some(cycle) = find_cycle(&edges) {
            let names: Vec<String> = cycle.iter().map(name).collect();
            cycles.push(format!("{}: {}", src.display(), names.join(" -> ")));
        }
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} crates found");
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_checker_finds_a_cycle_and_follows_reexports() {
    let files = BTreeMap::from([
        (vec![], "mod a; mod b; pub use b::Thing;".to_string()),
        (vec!["a".to_string()], "use crate::Thing;".to_string()),
        (
            vec!["b".to_string()],
            "fn f() { crate::a::g() }".to_string(),
        ),
    ]);
    let krate = Crate { files };
    let edges = graph(&krate);
    assert!(edges[&vec!["a".to_string()]].contains(&vec!["b".to_string()]));
    assert!(find_cycle(&edges).is_some());
    assert_eq!(
        use_tree("crate::{x::A, y::{B, C as D}}"),
        [
            vec!["crate", "x", "A"],
            vec!["crate", "y", "B"],
            vec!["crate", "y", "C"]
        ]
    );
}
