//! `tensorfile shard IN OUTDIR --max-shard-size 5GB [--prefix model]`:
//! split a file into shards the way huggingface_hub does; with `--plan`,
//! `--write-part`, `--commit` and `--abort`, write one set from several
//! processes.

use std::path::PathBuf;
use std::process::ExitCode;

use super::size::parse_size;
use tensorfile::set::SetStep;
use tensorfile_ops::shard::{shard, ShardReport, ShardRequest};

use super::looking::shown;
use super::words::{bytes, plural};
use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `shard`.
#[derive(clap::Args)]
pub struct Args {
    /// The file to split (or a directory or index, to re-shard a set).
    /// With --commit or --abort, give OUTDIR alone.
    #[arg(value_name = "IN")]
    input: PathBuf,
    /// The directory to write the shards and index to (created if needed;
    /// must not already hold weights with this prefix), or an object store
    /// prefix (s3://BUCKET/KEY/, gs://, az://): made in a temporary
    /// directory (TMPDIR), then uploaded, the shards first and the index
    /// last.
    #[arg(value_name = "OUTDIR")]
    out_dir: Option<PathBuf>,
    /// With OUTDIR in a store: replace a set already there (its index is
    /// removed first, then the shards replaced and the new index put
    /// last), which is otherwise refused. Not atomic for concurrent
    /// readers: during the replacement the set has no index.
    #[arg(long, conflicts_with = "step")]
    replace: bool,
    /// Write the set from several processes, step 1: stage a plan (which
    /// tensor goes to which shard, which writer writes each shard) in
    /// OUTDIR/.tensorfile-set-<id>/. Nothing appears under OUTDIR's own
    /// names until --commit.
    #[arg(long, group = "step")]
    plan: bool,
    /// With --plan: how many writers the shards are dealt to, round-robin.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "plan")]
    writers: usize,
    /// Step 2, in each writer: write the shards the plan gives writer
    /// RANK (0-based) into the staging folder, each atomically, taking the
    /// tensors from IN. A rerun replaces only that writer's shards.
    #[arg(long, value_name = "RANK", group = "step")]
    write_part: Option<usize>,
    /// Step 3, once every writer is done, in one process: check every
    /// shard against the plan, move them into OUTDIR, write the index
    /// last and remove the staging folder. Rerun it after an interrupted
    /// commit.
    #[arg(long, group = "step")]
    commit: bool,
    /// Remove the staged set (its plan and shards) instead.
    #[arg(long, group = "step")]
    abort: bool,
    /// Largest data size of a shard: bytes, or decimal KB, MB, GB, TB
    /// (5GB = 5,000,000,000 bytes). A larger tensor gets a shard alone.
    #[arg(long, value_name = "SIZE", default_value = "5GB", value_parser = parse_size)]
    max_shard_size: u64,
    /// File name prefix: PREFIX-00001-of-00003.safetensors,
    /// PREFIX.safetensors.index.json.
    #[arg(long, value_name = "PREFIX", default_value = "model", value_parser = parse_prefix)]
    prefix: String,
    /// Do not sync the files to disk (faster; each stays atomic).
    #[arg(long)]
    no_sync: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        (Some(&self.input), self.json)
    }
}

fn parse_prefix(s: &str) -> Result<String, String> {
    if s.is_empty() || s.contains(['/', '\\', '\0']) || s == "." || s == ".." {
        Err(format!("`{s}` is not a file name prefix"))
    } else {
        Ok(s.to_string())
    }
}

impl Args {
    /// The step of a set written by several processes, if one is asked.
    fn step(&self) -> Option<SetStep> {
        if self.plan {
            Some(SetStep::Plan {
                writers: self.writers,
            })
        } else if let Some(writer) = self.write_part {
            Some(SetStep::WritePart { writer })
        } else if self.commit {
            Some(SetStep::Commit)
        } else if self.abort {
            Some(SetStep::Abort)
        } else {
            None
        }
    }

    /// The operation's request: IN and OUTDIR, or OUTDIR alone for
    /// --commit and --abort.
    pub fn request(&self) -> Result<ShardRequest, Failure> {
        let alone = matches!(self.step(), Some(SetStep::Commit | SetStep::Abort));
        let (input, out_dir) = match (&self.out_dir, alone) {
            (Some(out_dir), false) => (self.input.clone(), out_dir.clone()),
            (None, true) => (PathBuf::new(), self.input.clone()),
            (None, false) => return Err(super::Usage::failure("give IN and OUTDIR")),
            (Some(_), true) => {
                return Err(super::Usage::failure(
                    "--commit and --abort take OUTDIR alone",
                ))
            }
        };
        Ok(ShardRequest {
            input,
            out_dir,
            max_shard_size: self.max_shard_size,
            prefix: self.prefix.clone(),
            sync: !self.no_sync,
            timeout: super::remote::timeout_seconds(),
            step: self.step(),
            replace: self.replace,
        })
    }
}

/// Splits IN into OUTDIR, or runs a step of a set written by several
/// processes.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let request = args.request()?;
    if let Some(step) = request.step {
        let report = shard(&request, &())?;
        print_step(&report, step, args.json)?;
        return Ok(ExitCode::SUCCESS);
    }
    let bar = Bar::bytes_when_told("shard", |message| super::warn(message));
    let report = shard(&request, &bar)?;
    drop(bar);
    if args.json {
        super::out_json(&report)?;
    } else {
        print_files(&report);
        out(format_args!(
            "{}, {}, {} of data",
            plural(report.files.len() as u64, "shard"),
            plural(report.tensors as u64, "tensor"),
            bytes(report.total_size)
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a report's files, one a line (escaped: a staged plan names
/// them), the index last.
fn print_files(report: &ShardReport) {
    for file in report.files.iter().chain(&report.index) {
        out(shown(file));
    }
}

/// Prints what a step did: its files, then a line saying what it was.
fn print_step(report: &ShardReport, step: SetStep, json: bool) -> Result<(), Failure> {
    if json {
        return super::out_json(report);
    }
    print_files(report);
    let staging = report.staging.clone().unwrap_or_default();
    let what = match step {
        SetStep::Plan { .. } => format!(
            "planned {} for {}, staged in {}",
            plural(report.files.len() as u64, "shard"),
            plural(report.writers.unwrap_or(1) as u64, "writer"),
            shown(&staging)
        ),
        SetStep::WritePart { writer } => format!(
            "writer {writer} staged {}",
            plural(report.files.len() as u64, "shard")
        ),
        SetStep::Commit => format!(
            "committed {}, {} of data",
            plural(report.files.len() as u64, "shard"),
            bytes(report.total_size)
        ),
        SetStep::Abort => format!("removed {}", shown(&staging)),
    };
    out(what);
    Ok(())
}
