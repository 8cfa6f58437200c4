//! The AWS shared config and credentials files, parsed as the AWS SDKs
//! document them: `[profile NAME]` (and `[default]`) in the config file,
//! `[NAME]` in the credentials file; `#` and `;` comments (whole lines, or
//! after whitespace on a value line); `key = value` properties; indented
//! continuation lines, which hold the sub-properties of a property with an
//! empty value (`s3 =` then `  addressing_style = path`, kept as
//! `s3.addressing_style`) or continue a value.

use std::collections::BTreeMap;

/// One profile's properties, keys lowercased.
pub(crate) type Profile = BTreeMap<String, String>;

/// Which file a text comes from: the section names differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    /// `~/.aws/config`: `[default]` and `[profile NAME]`.
    Config,
    /// `~/.aws/credentials`: `[NAME]`.
    Credentials,
}

/// The profiles of one file, by name. Lines that are not understood (a
/// property before any section, a section of another kind such as
/// `[sso-session x]`) are skipped, as the SDKs skip them.
pub(crate) fn parse(text: &str, kind: FileKind) -> BTreeMap<String, Profile> {
    let mut out: BTreeMap<String, Profile> = BTreeMap::new();
    // The profile being read (None: lines are skipped), and the last
    // property, which continuation lines extend.
    let mut current: Option<String> = None;
    let mut last_key: Option<String> = None;
    for raw in text.lines() {
        let line = raw.trim_end_matches('\r');
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        let indented = line.starts_with([' ', '\t']);
        if indented {
            // A continuation of the last property.
            let (Some(name), Some(key)) = (&current, &last_key) else {
                continue;
            };
            let Some(profile) = out.get_mut(name) else {
                continue;
            };
            match trimmed.split_once('=') {
                Some((k, v))
                    if profile.get(key).is_some_and(|v| v.is_empty()) || key.contains('.') =>
                {
                    // A sub-property (`s3 =` then `addressing_style = path`).
                    let parent = key.split('.').next().unwrap_or(key).to_string();
                    profile.insert(
                        format!("{parent}.{}", k.trim().to_ascii_lowercase()),
                        strip_comment(v).to_string(),
                    );
                    last_key = Some(parent);
                }
                _ => {
                    if let Some(v) = profile.get_mut(key) {
                        v.push('\n');
                        v.push_str(trimmed);
                    }
                }
            }
            continue;
        }
        last_key = None;
        if let Some(section) = trimmed.strip_prefix('[') {
            let section = strip_comment(section);
            let Some(section) = section.strip_suffix(']') else {
                current = None;
                continue;
            };
            current = section_profile(section.trim(), kind);
            if let Some(name) = &current {
                out.entry(name.clone()).or_default();
            }
            continue;
        }
        let Some(name) = &current else { continue };
        let Some((k, v)) = trimmed.split_once('=') else {
            continue;
        };
        let key = k.trim().to_ascii_lowercase();
        if key.is_empty() {
            continue;
        }
        if let Some(profile) = out.get_mut(name) {
            profile.insert(key.clone(), strip_comment(v).to_string());
        }
        last_key = Some(key);
    }
    out
}

/// The profile a section header names, if it names one.
fn section_profile(section: &str, kind: FileKind) -> Option<String> {
    match kind {
        FileKind::Credentials => (!section.is_empty()).then(|| section.to_string()),
        FileKind::Config => {
            if section == "default" {
                return Some("default".into());
            }
            let rest = section.strip_prefix("profile")?;
            // `[profile x]`, with any whitespace between.
            if !rest.starts_with([' ', '\t']) {
                return None;
            }
            let name = rest.trim();
            (!name.is_empty() && !name.contains(char::is_whitespace)).then(|| name.to_string())
        }
    }
}

/// A value without a trailing comment (`#` or `;` after whitespace).
fn strip_comment(value: &str) -> &str {
    let v = value.trim();
    let bytes = v.as_bytes();
    for i in 1..bytes.len() {
        if (bytes[i] == b'#' || bytes[i] == b';') && bytes[i - 1].is_ascii_whitespace() {
            return v[..i].trim_end();
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_and_credentials_sections() {
        let config = "\
# a comment
[default]
region = eu-west-1 ; the main one
[profile dev]
role_arn = arn:aws:iam::123456789012:role/dev
source_profile=default
s3 =
  addressing_style = path
  max_concurrent_requests = 4
[dev2]
region = ignored-in-config
[sso-session x]
sso_region = us-east-1
[profile  spaced ]
region=ap-south-1
";
        let p = parse(config, FileKind::Config);
        assert_eq!(p["default"]["region"], "eu-west-1");
        assert_eq!(p["dev"]["source_profile"], "default");
        assert_eq!(p["dev"]["s3.addressing_style"], "path");
        assert_eq!(p["dev"]["s3.max_concurrent_requests"], "4");
        assert_eq!(p["spaced"]["region"], "ap-south-1");
        assert!(!p.contains_key("dev2") && !p.contains_key("x"));

        let creds = "\
[default]
aws_access_key_id = AKIDDEFAULT
aws_secret_access_key = se#cret
; comment
[profile odd]
aws_access_key_id = AKIDODD
[dev]
AWS_Access_Key_Id = AKIDDEV
";
        let p = parse(creds, FileKind::Credentials);
        assert_eq!(p["default"]["aws_access_key_id"], "AKIDDEFAULT");
        // `#` without whitespace before it is part of the value.
        assert_eq!(p["default"]["aws_secret_access_key"], "se#cret");
        assert_eq!(p["dev"]["aws_access_key_id"], "AKIDDEV");
        assert!(p.contains_key("profile odd"));
    }

    #[test]
    fn continuation_lines_extend_values() {
        let p = parse("[default]\nnote = one\n  two\n", FileKind::Config);
        assert_eq!(p["default"]["note"], "one\ntwo");
        // A property before any section and a broken header are skipped.
        let p = parse(
            "key = v\n[default\nx = 1\n[default]\ny = 2\n",
            FileKind::Config,
        );
        assert_eq!(p.len(), 1);
        assert_eq!(p["default"].get("x"), None);
        assert_eq!(p["default"]["y"], "2");
    }
}
