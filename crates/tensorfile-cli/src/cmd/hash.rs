//! `tensorfile hash FILE|DIR... [--per-tensor] [--json] [--write-manifest
//! M.json]`: sha256 of every file, of each safetensors file's data
//! section, and optionally of every tensor; a model-signing manifest.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensorfile_ops::hash::{hash, HashRequest};

use super::looking::{escape, shown};
use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `hash`.
#[derive(clap::Args)]
pub struct Args {
    /// Files, or directories (every file under them, git files left out,
    /// links followed).
    #[arg(value_name = "FILE|DIR", required = true)]
    paths: Vec<PathBuf>,
    /// Also the sha256 of every tensor of each safetensors file (the
    /// digests `inspect --hash` prints).
    #[arg(long)]
    per_tensor: bool,
    /// Only the whole-file sha256 (no data-section digest: one hash per
    /// byte instead of two).
    #[arg(long)]
    file_only: bool,
    /// Write a manifest of DIR's files: the unsigned in-toto statement
    /// that OpenSSF model signing (the `model-signing` package) signs,
    /// listing each file with its sha256. `verify DIR --manifest` checks it.
    #[arg(long, value_name = "M.json")]
    write_manifest: Option<PathBuf>,
    /// Print JSON: every file's size, sha256, data-section sha256 and start,
    /// and tensors' sha256.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&Path>, bool) {
        (
            self.paths
                .first()
                .map(PathBuf::as_path)
                .filter(|_| self.paths.len() == 1),
            self.json,
        )
    }

    /// The request: the inputs and what to hash.
    fn request(&self) -> HashRequest {
        let mut request = HashRequest::new(&self.paths);
        request.per_tensor = self.per_tensor;
        request.file_only = self.file_only;
        request.write_manifest = self.write_manifest.clone();
        request
    }
}

/// Hashes the inputs; exit 1 when one cannot be read, or when a
/// `*.safetensors` file is invalid (its whole-file digest is printed all
/// the same).
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let bar = Bar::bytes_when_told("hashing", |m| super::warn(m));
    let report = hash(&args.request(), &bar)?;
    drop(bar);
    for f in &report.files {
        if let Some(why) = &f.invalid {
            eprintln!(
                "tensorfile: {} (its data section is not hashed)",
                super::escape_text(why)
            );
        }
    }
    let code = if report.any_invalid() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    if args.json {
        out(serde_json::to_string(&report).map_err(|e| e.to_string())?);
        return Ok(code);
    }
    for f in &report.files {
        let name = if f.in_dir {
            escape(&f.path)
        } else {
            escape(&f.name)
        };
        // The first line of each file in sha256sum's format.
        out(format_args!("{}  {name}", f.sha256));
        if let (Some(start), Some(sha256)) = (f.data_start, &f.data_sha256) {
            out(format_args!("  data section from byte {start}: {sha256}"));
        }
        for t in f.tensors.iter().flatten() {
            out(format_args!("  tensor {}: {}", escape(&t.name), t.sha256));
        }
    }
    if let Some(m) = &args.write_manifest {
        out(format_args!("manifest: {}", shown(m)));
    }
    Ok(code)
}

/// `--embed-hash` of the commands that write safetensors.
#[derive(clap::Args)]
pub struct EmbedArgs {
    /// Record every tensor's sha256 in OUT's metadata (each file's own
    /// tensors, for a set), under the key "tensorfile.sha256" (a JSON object
    /// of tensor name to hex digest); `tensorfile verify OUT` then names any
    /// tensor whose bytes changed. Each file written is read back and saved
    /// once more (atomically) to do it.
    #[arg(long)]
    pub embed_hash: bool,
}
