//! `tensorfile fetch SOURCE [DEST]`: copy a remote file, set or model
//! directory to local disk (see `tensorfile_remote::fetch`); an `hf://`
//! source without DEST fills the shared Hugging Face cache
//! (`tensorfile_remote::fetch::fetch_to_cache`).

use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile_ops::fetch::{fetch, FetchRequest};

use super::words::{bytes, plural};
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

    /// The request: source, destination, how the copy is made (the
    /// command's remote options, `--timeout`'s deadline included).
    fn request(&self) -> FetchRequest {
        let mut request = FetchRequest::new(&self.source, self.dest.clone());
        request.concurrency = self.concurrency;
        request.chunk_size = self.chunk_size;
        request.resume = !self.no_resume;
        request.sync = !self.no_sync;
        request.remote = super::remote::options();
        request
    }
}

/// Copies SOURCE to DEST; exit 1 when a request, a write or a verification fails.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    // The bar is made once the fetch knows its total; notes go to stderr.
    let bar = Bar::bytes_when_told("fetching", |message| super::warn(message));
    let result = fetch(&args.request(), &bar);
    drop(bar);
    let fetched = result?;
    if args.json {
        out(serde_json::to_string(&fetched).map_err(|e| e.to_string())?);
        return Ok(ExitCode::SUCCESS);
    }
    for f in &fetched.files {
        let what = match f.outcome.as_str() {
            "resumed" => format!(
                "fetched {} (resumed, {} on disk)",
                bytes(f.bytes),
                bytes(f.resumed_from)
            ),
            "up to date" => "up to date".to_string(),
            "linked from cache" => format!(
                "hard-linked from the Hugging Face cache, {}",
                bytes(f.bytes)
            ),
            "copied from cache" => {
                format!("copied from the Hugging Face cache, {}", bytes(f.bytes))
            }
            _ => format!("fetched {}", bytes(f.bytes)),
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
        out(format_args!("{}: {what}{checks}", f.path));
    }
    if let Some(set) = fetched.set {
        out(format_args!(
            "{}: set ok ({}, {})",
            fetched.dest,
            plural(set.shards as u64, "shard"),
            plural(set.tensors as u64, "tensor")
        ));
    }
    out(format_args!(
        "{}, {}, {} received, {}",
        plural(fetched.files.len() as u64, "file"),
        plural(fetched.requests, "request"),
        bytes(fetched.bytes_received),
        plural(fetched.retries, "retry")
    ));
    Ok(ExitCode::SUCCESS)
}
