//! The repository as a newcomer sees it: the license files the crates
//! declare, a changelog, crate metadata a registry shows, a `rust-version`
//! the locked dependencies agree with, documentation that `cargo doc`
//! does not overwrite, and links in the Markdown files that lead somewhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `cargo metadata` of the workspace (`--no-deps`: its own packages only).
fn metadata(no_deps: bool) -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut command = Command::new(cargo);
    command
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(root());
    if no_deps {
        command.arg("--no-deps");
    }
    let out = command.output().expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// The workspace's packages that may be published (no `publish = false`).
fn published(meta: &Value) -> Vec<&Value> {
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["publish"].as_array().is_none_or(|r| !r.is_empty()))
        .collect()
}

/// `"1.88"` or `"1.88.0"` as numbers to compare.
fn version(v: &str) -> (u64, u64, u64) {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap());
    let major = parts.next().unwrap();
    let minor = parts.next().unwrap_or(0);
    let patch = parts.next().unwrap_or(0);
    (major, minor, patch)
}

#[test]
fn the_declared_licenses_are_there() {
    let root = root();
    let mit = read(&root.join("LICENSE-MIT"));
    assert!(mit.starts_with("MIT License"), "LICENSE-MIT");
    let apache = read(&root.join("LICENSE-APACHE"));
    assert!(
        apache.contains("Apache License") && apache.contains("Version 2.0, January 2004"),
        "LICENSE-APACHE"
    );
    assert!(
        apache.contains("END OF TERMS AND CONDITIONS"),
        "the whole text"
    );

    let meta = metadata(true);
    for p in meta["packages"].as_array().unwrap() {
        assert_eq!(p["license"], "MIT OR Apache-2.0", "{}", p["name"]);
    }
    // A published crate carries both texts in its package.
    for p in published(&meta) {
        let dir = Path::new(p["manifest_path"].as_str().unwrap())
            .parent()
            .unwrap();
        for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
            let text = read(&dir.join(file));
            assert_eq!(text, read(&root.join(file)), "{}/{file}", p["name"]);
        }
    }
}

#[test]
fn there_is_a_changelog() {
    let changelog = read(&root().join("CHANGELOG.md"));
    assert!(changelog.starts_with("# Changelog"));
    assert!(
        changelog.contains("## [Unreleased]") || changelog.contains("## [0."),
        "a section per version"
    );
}

/// What crates.io shows of each published crate: a description, the
/// README, keywords and categories; no placeholder address anywhere.
#[test]
fn published_crates_have_their_metadata() {
    let meta = metadata(true);
    let published = published(&meta);
    assert!(published.len() >= 4, "core, umbrella, pytorch, cli");
    for p in published {
        let name = p["name"].as_str().unwrap();
        assert!(
            p["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{name}"
        );
        let readme = p["readme"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no readme"));
        assert!(Path::new(readme).is_file(), "{name}: readme {readme}");
        for (field, most) in [("keywords", 5), ("categories", 5)] {
            let list = p[field].as_array().unwrap();
            assert!(
                !list.is_empty() && list.len() <= most,
                "{name}: {field} {list:?}"
            );
        }
        for k in p["keywords"].as_array().unwrap() {
            let k = k.as_str().unwrap();
            assert!(
                k.len() <= 20
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{name}: keyword {k:?}"
            );
        }
    }
    for p in meta["packages"].as_array().unwrap() {
        let manifest = read(Path::new(p["manifest_path"].as_str().unwrap()));
        assert!(!manifest.contains("example.invalid"), "{}", p["name"]);
    }
    assert!(!read(&root().join("Cargo.toml")).contains("example.invalid"));
}

/// `rust-version` is at least what every locked dependency says it needs
/// (dev-dependencies included: `cargo test` builds them), and the README
/// gives the same version.
#[test]
fn rust_version_is_what_the_locked_dependencies_need() {
    let own = metadata(true);
    let declared = own["packages"][0]["rust_version"]
        .as_str()
        .expect("the workspace declares a rust-version")
        .to_string();
    for p in own["packages"].as_array().unwrap() {
        assert_eq!(p["rust_version"], declared.as_str(), "{}", p["name"]);
    }

    let all = metadata(false);
    let members: Vec<&Value> = all["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    let in_resolve: Vec<&str> = all["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    let mut needs: BTreeMap<(u64, u64, u64), Vec<String>> = BTreeMap::new();
    for p in all["packages"].as_array().unwrap() {
        if members.contains(&&p["id"]) || !in_resolve.contains(&p["id"].as_str().unwrap()) {
            continue;
        }
        if let Some(v) = p["rust_version"].as_str() {
            needs
                .entry(version(v))
                .or_default()
                .push(format!("{} {}", p["name"], p["version"]));
        }
    }
    let (most, who) = needs
        .last_key_value()
        .expect("dependencies with a rust-version");
    assert!(
        version(&declared) >= *most,
        "rust-version {declared} is below {most:?}, which {who:?} need"
    );

    let readme = read(&root().join("README.md"));
    let (major, minor, _) = version(&declared);
    assert!(
        readme.contains(&format!("Rust {major}.{minor} or newer")),
        "the README's prerequisites give rust-version {declared}"
    );
}

/// No two documented targets share a crate name: the `tensorfile` binary
/// (`doc = false`) would overwrite the library's `target/doc/tensorfile`.
#[test]
fn cargo_doc_shows_the_library() {
    let meta = metadata(true);
    let mut documented: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in meta["packages"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let kinds: Vec<&str> = t["kind"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap())
                .collect();
            let documents = kinds.iter().any(|k| {
                [
                    "lib",
                    "rlib",
                    "dylib",
                    "cdylib",
                    "staticlib",
                    "bin",
                    "proc-macro",
                ]
                .contains(k)
            });
            if documents && t["doc"].as_bool().unwrap_or(true) {
                documented
                    .entry(t["name"].as_str().unwrap().replace('-', "_"))
                    .or_default()
                    .push(format!("{} ({})", p["name"], kinds.join(",")));
            }
        }
    }
    for (name, targets) in &documented {
        assert_eq!(
            targets.len(),
            1,
            "target/doc/{name} is written by {targets:?}"
        );
    }
    assert!(
        documented["tensorfile"][0].starts_with("\"tensorfile\" (lib"),
        "{:?}",
        documented["tensorfile"]
    );
}

/// Relative links in the repository's Markdown lead to files that exist,
/// and the format page is the copy in `docs/`.
#[test]
fn markdown_links_lead_somewhere() {
    let root = root();
    let mut pages = vec![
        root.join("README.md"),
        root.join("CHANGELOG.md"),
        root.join("tests/fixtures/README.md"),
    ];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    assert!(
        root.join("docs/model-safetensors.md").is_file(),
        "the format page"
    );
    let mut links = 0;
    for page in &pages {
        let text = read(page);
        assert!(
            !text.contains("spec/model-safetensors.md"),
            "{} points to a spec outside the repository",
            page.display()
        );
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let file = target.split('#').next().unwrap();
            let path = page.parent().unwrap().join(file);
            assert!(path.exists(), "{}: link to {target}", page.display());
            links += 1;
        }
    }
    assert!(links >= 5, "the pages link to each other ({links} links)");
}
