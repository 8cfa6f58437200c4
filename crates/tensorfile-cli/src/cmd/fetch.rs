//! `tensorfile fetch SOURCE [DEST]`: copy a remote file, set or model
//! directory to local disk (see `tensorfile_remote::fetch`); an `hf://`
//! source without DEST fills the shared Hugging Face cache
//! (`tensorfile_remote::fetch::fetch_to_cache`).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tensorfile_remote::fetch::{fetch, fetch_to_cache, FetchOptions, Outcome};
use tensorfile_remote::Client;

use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `fetch`.
#[derive(clap::Args)]
pub struct Args {
    /// What to copy: a file, an index, or a directory (`s3://BUCKET/PREFIX/`,
    /// `hf://ORG/REPO[@REVISION][/PATH]`, `https://HOST/PATH`).
    #[arg(value_name = "SOURCE")]
    source: String,
    /// Where: a file path (or a directory to put it in) for a file, a
    /// directory for a set or a model directory. Without it, an `hf://`
    /// source goes into the Hugging Face cache (HF_HUB_CACHE, else
    /// HF_HOME/hub, else ~/.cache/huggingface/hub), as `huggingface-cli
    /// download` puts it there.
    #[arg(value_name = "DEST")]
    dest: Option<PathBuf>,
    /// Range requests in flight at once.
    #[arg(long, value_name = "N", default_value_t = 16)]
    concurrency: usize,
    /// Bytes per range request (bytes, or decimal KB, MB, GB).
    #[arg(long, value_name = "SIZE", value_parser = super::size::parse_size, default_value = "8MB")]
    chunk_size: u64,
    /// Start over instead of going on from a partial copy.
    #[arg(long)]
    no_resume: bool,
    /// Do not sync files and directories to disk (faster; each file still
    /// appears whole or not at all).
    #[arg(long)]
    no_sync: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        (Some(std::path::Path::new(&self.source)), self.json)
    }
}

/// Copies SOURCE to DEST; exit 1 when a request, a write or a verification fails.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    if !tensorfile_remote::is_url(&args.source) {
        return Err(super::Usage::failure(format!(
            "{}: not a URL (s3://, hf://, http:// or https://)",
            args.source
        )));
    }
    if args.dest.is_none() && !args.source.to_ascii_lowercase().starts_with("hf://") {
        return Err(super::Usage::failure(format!(
            "{}: a destination is needed (only an hf:// source goes to the Hugging Face cache without one)",
            args.source
        )));
    }
    if args.concurrency == 0 || args.chunk_size == 0 {
        return Err(super::Usage::failure(
            "--concurrency and --chunk-size must be at least 1",
        ));
    }
    let client = Client::new(
        super::remote::options()
            .with_concurrency(args.concurrency)
            .with_chunk_size(args.chunk_size),
    );
    let options = FetchOptions::default()
        .with_sync(!args.no_sync)
        .with_resume(!args.no_resume);
    // The bar is made once the fetch knows its total; notes go to stderr.
    let bar = Bar::bytes_when_told("fetching", |message| super::warn(message));
    let result = match &args.dest {
        Some(dest) => fetch(&args.source, dest, &client, &options, &bar),
        None => fetch_to_cache(&args.source, &client, &options, &bar),
    };
    drop(bar);
    let fetched = result?;
    let counts = client.stats();
    if args.json {
        let files: Vec<_> = fetched
            .files
            .iter()
            .map(|f| {
                let (outcome, from) = match f.outcome {
                    Outcome::Fetched => ("fetched", 0),
                    Outcome::Resumed { from } => ("resumed", from),
                    Outcome::UpToDate => ("up to date", 0),
                    Outcome::FromCache { linked: true } => ("linked from cache", 0),
                    Outcome::FromCache { linked: false } => ("copied from cache", 0),
                };
                json!({
                    "name": f.name,
                    "source": f.url,
                    "path": f.path,
                    "bytes": f.len,
                    "outcome": outcome,
                    "resumed_from": from,
                    "sha256": f.sha256,
                    "header_checked": f.header_checked,
                })
            })
            .collect();
        out(json!({
            "source": args.source,
            "dest": fetched.dest,
            "files": files,
            "set": fetched.set.map(|(shards, tensors)| json!({"shards": shards, "tensors": tensors})),
            "requests": counts.requests,
            "bytes_received": counts.body_bytes,
            "retries": counts.retries,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    for f in &fetched.files {
        let what = match f.outcome {
            Outcome::Fetched => format!("fetched {} bytes", f.len),
            Outcome::Resumed { from } => {
                format!("fetched {} bytes (resumed, {from} were on disk)", f.len)
            }
            Outcome::UpToDate => "up to date".to_string(),
            Outcome::FromCache { linked } => format!(
                "{} the Hugging Face cache ({} bytes)",
                if linked {
                    "hard-linked from"
                } else {
                    "copied from"
                },
                f.len
            ),
        };
        let mut checks = Vec::new();
        if f.sha256.is_some() {
            checks.push("sha256 verified");
        }
        if f.header_checked {
            checks.push("header valid");
        }
        let checks = if checks.is_empty() {
            String::new()
        } else {
            format!("; {}", checks.join(", "))
        };
        out(format_args!("{}: {what}{checks}", f.path.display()));
    }
    if let Some((shards, tensors)) = fetched.set {
        out(format_args!(
            "{}: set ok ({shards} shards, {tensors} tensors)",
            fetched.dest.display()
        ));
    }
    out(format_args!(
        "{} files, {} requests, {} bytes received, {} retries",
        fetched.files.len(),
        counts.requests,
        counts.body_bytes,
        counts.retries
    ));
    Ok(ExitCode::SUCCESS)
}
