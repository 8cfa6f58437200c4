//! `shard`: a safetensors file (or set) split into shards the way
//! huggingface_hub does, with its index.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use tensorfile::set::{split, SetStep, Sharding, SplitOptions, StagedPlan, StagedSet};
use tensorfile::{Error, Progress, Result, WriteOptions};

/// What to split, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShardRequest {
    /// The file to split (or a directory or an index, to re-shard a set),
    /// local or at a URL.
    pub input: PathBuf,
    /// The directory to write the shards and index to (created if needed;
    /// it must not already hold weights with this prefix).
    pub out_dir: PathBuf,
    /// Largest data size of a shard, in bytes (default 5 GB); a larger
    /// tensor gets a shard alone.
    pub max_shard_size: u64,
    /// File name prefix: `PREFIX-00001-of-00003.safetensors`,
    /// `PREFIX.safetensors.index.json`.
    pub prefix: String,
    /// Sync the files to disk (each is atomic either way).
    pub sync: bool,
    /// One deadline, in seconds, for all of the input's remote reads.
    pub timeout: Option<f64>,
    /// A step of writing the set from several processes instead of
    /// splitting at once (see [`tensorfile::set::StagedSet`]): `input` is
    /// the source of the tensors for `plan` and `write-part`, unused for
    /// `commit` and `abort`.
    pub step: Option<SetStep>,
    /// For an `out_dir` in a store (`s3://`, `gs://`, `az://`), without
    /// `step`: replace a set already there (its old index removed first,
    /// the new one put last); without it, one is refused. Not atomic for
    /// concurrent readers.
    pub replace: bool,
}

impl Default for ShardRequest {
    fn default() -> ShardRequest {
        ShardRequest {
            input: PathBuf::new(),
            out_dir: PathBuf::new(),
            max_shard_size: 5_000_000_000,
            prefix: "model".into(),
            sync: true,
            timeout: None,
            step: None,
            replace: false,
        }
    }
}

/// What was written: `tensorfile shard --json`. Fields are in the order of
/// their names: the order the command has always printed its keys in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardReport {
    /// The shards written, in order (one file when everything fits).
    pub files: Vec<PathBuf>,
    /// The index, when there are several shards.
    pub index: Option<PathBuf>,
    /// The input, as given; none for the steps that read no input
    /// (`commit`, `abort`).
    pub input: Option<PathBuf>,
    /// For a step: the plan's id.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub plan_id: Option<String>,
    /// For a step: the staging folder (`OUTDIR/.tensorfile-set-<id>`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub staging: Option<PathBuf>,
    /// The step run, if one was. `files` are then the plan's files
    /// (`plan`), the staged ones written (`write-part`), the published
    /// ones (`commit`), or none (`abort`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub step: Option<SetStep>,
    /// Tensors written (the text's count; not a `--json` key).
    #[serde(skip)]
    pub tensors: usize,
    /// The data bytes across all shards.
    pub total_size: u64,
    /// For a step: how many writers the plan names.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub writers: Option<usize>,
}

/// Whether `prefix` can begin a file name in the output directory.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.contains(['/', '\\', '\0']) || prefix == "." || prefix == ".." {
        return Err(Error::request(format!(
            "`{prefix}` is not a file name prefix"
        )));
    }
    Ok(())
}

/// Splits the input into shards in `out_dir`, each written atomically.
/// `progress` counts the data bytes written.
///
/// # Errors
/// A prefix that is not a file name's ([`Error::Request`]), an input that
/// is not safetensors or cannot be read, a failed write.
pub fn shard(request: &ShardRequest, progress: &dyn Progress) -> Result<ShardReport> {
    check_prefix(&request.prefix)?;
    if let Some(step) = request.step {
        return shard_step(request, step);
    }
    let source = super::merge::open_source(&request.input, request.timeout)?;
    let options = SplitOptions::new(request.max_shard_size, request.prefix.clone())
        .with_write(WriteOptions::default().with_sync(request.sync));
    progress.total(source.data_len());
    let summary = crate::bucket::via_local(
        &request.out_dir,
        request.replace,
        |out| Ok(split(&source, out, &options, progress)?),
        |s, map| {
            s.files = s.files.iter().map(|f| map(f)).collect();
            s.index = s.index.as_deref().map(map);
        },
    )?;
    Ok(ShardReport {
        files: summary.files,
        index: summary.index,
        input: Some(request.input.clone()),
        plan_id: None,
        staging: None,
        step: None,
        tensors: source.len(),
        total_size: summary.total_size,
        writers: None,
    })
}

/// Runs one step of writing the set `request.out_dir` from several
/// processes: in a local directory, or under a bucket's prefix.
fn shard_step(request: &ShardRequest, step: SetStep) -> Result<ShardReport> {
    let options = WriteOptions::default().with_sync(request.sync);
    let mut tensors = 0;
    let planned = match step {
        SetStep::Plan { writers } => {
            if writers == 0 {
                return Err(Error::request("a set needs at least one writer"));
            }
            let source = super::merge::open_source(&request.input, request.timeout)?;
            let specs: Vec<tensorfile::TensorSpec> = source
                .tensor_data()
                .iter()
                .map(|t| tensorfile::TensorSpec::new(t.name(), t.dtype(), t.shape()))
                .collect();
            tensors = specs.len();
            let metadata = source.metadata()?;
            Some(StagedPlan::new(
                &request.prefix,
                &specs,
                Some(&metadata),
                &Sharding::MaxSize(request.max_shard_size),
                writers,
                &options,
            )?)
        }
        _ => None,
    };
    if let Some(url) = crate::bucket::store_url(&request.out_dir) {
        return bucket_step(request, step, planned, tensors, url);
    }
    let set = match planned {
        Some(plan) => StagedSet::prepare(&request.out_dir, plan)?,
        None => StagedSet::open(&request.out_dir, &request.prefix)?,
    };
    let staging = set.stage().staging().to_path_buf();
    run_step(request, step, &set, staging, tensors)
}

/// [`shard_step`] for an `OUTDIR` in a bucket
/// ([`tensorfile_remote::stage::BucketStage`]).
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
fn bucket_step(
    request: &ShardRequest,
    step: SetStep,
    planned: Option<StagedPlan>,
    tensors: usize,
    url: &str,
) -> Result<ShardReport> {
    use tensorfile_remote::stage::BucketStage;
    let remote = tensorfile_remote::RemoteOptions::default();
    let plan = match planned {
        Some(plan) => plan,
        None => {
            let mut found = BucketStage::find(url, &request.prefix, &remote)?;
            match found.len() {
                1 => found.remove(0),
                0 => {
                    return Err(tensorfile_core::Error::Output {
                        path: request.out_dir.clone(),
                        problem: tensorfile_core::OutputError::Staging {
                            problem: format!(
                                "no set is staged here for files named {:?} (never planned, or already committed or aborted)",
                                request.prefix
                            ),
                        },
                    }
                    .into())
                }
                n => {
                    return Err(tensorfile_core::Error::Output {
                        path: request.out_dir.clone(),
                        problem: tensorfile_core::OutputError::Staging {
                            problem: format!(
                                "{n} plans are staged here for files named {:?}: abort all but one",
                                request.prefix
                            ),
                        },
                    }
                    .into())
                }
            }
        }
    };
    let stage = BucketStage::new(url, &plan, &remote)?;
    let staging = stage.staging();
    let set = StagedSet::with_stage(stage, plan)?;
    run_step(request, step, &set, staging, tensors)
}

#[cfg(not(any(feature = "gcs", feature = "azure", feature = "s3-store")))]
fn bucket_step(
    _request: &ShardRequest,
    _step: SetStep,
    _planned: Option<StagedPlan>,
    _tensors: usize,
    url: &str,
) -> Result<ShardReport> {
    Err(Error::request(format!(
        "{url}: this build cannot write to object stores (tensorfile-ops' features `s3-store`, `gcs`, `azure`)"
    )))
}

/// Runs `step` on the staged `set` (its staging area `staging`).
fn run_step<S: tensorfile_core::set::SetStage>(
    request: &ShardRequest,
    step: SetStep,
    set: &StagedSet<S>,
    staging: PathBuf,
    tensors: usize,
) -> Result<ShardReport> {
    let plan = set.plan();
    let mut report = ShardReport {
        files: Vec::new(),
        index: None,
        input: matches!(step, SetStep::Plan { .. } | SetStep::WritePart { .. })
            .then(|| request.input.clone()),
        plan_id: Some(plan.id()),
        staging: Some(staging.clone()),
        step: Some(step),
        tensors,
        total_size: plan.total_size(),
        writers: Some(plan.writers()),
    };
    match step {
        SetStep::Plan { .. } => {
            report.files = plan
                .parts()
                .iter()
                .map(|p| request.out_dir.join(&p.file))
                .collect();
        }
        SetStep::WritePart { writer } => {
            if writer >= plan.writers() {
                return Err(Error::request(format!(
                    "the plan has {} writers (0 to {}), not writer {writer}",
                    plan.writers(),
                    plan.writers() - 1
                )));
            }
            let source = super::merge::open_source(&request.input, request.timeout)?;
            let tensors = source.tensor_data();
            let written = set.write_parts_of(writer, &tensors, request.sync)?;
            report.files = written
                .iter()
                .map(|&k| staging.join(&plan.parts()[k].file))
                .collect();
        }
        SetStep::Commit => {
            let summary = set.commit(request.sync)?;
            report.files = summary.files;
            report.index = summary.index;
        }
        SetStep::Abort => set.abort()?,
    }
    Ok(report)
}
