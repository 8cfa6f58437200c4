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
        progress,
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
/// processes, the plan and the tensors read from `request.input`.
fn shard_step(request: &ShardRequest, step: SetStep) -> Result<ShardReport> {
    let options = WriteOptions::default().with_sync(request.sync);
    match step {
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
            let metadata = source.metadata()?;
            let plan = StagedPlan::new(
                &request.prefix,
                &specs,
                Some(&metadata),
                &Sharding::MaxSize(request.max_shard_size),
                writers,
                &options,
            )?;
            request.run_step::<tensorfile::TensorRef<'_>>(Some(plan), &[])
        }
        SetStep::WritePart { writer } => {
            let source = super::merge::open_source(&request.input, request.timeout)?;
            let report = request.run_step(None, &source.tensor_data())?;
            // A writer past the plan's wrote nothing: a slip, said so.
            let writers = report.writers.unwrap_or(1);
            if writer >= writers {
                return Err(Error::request(format!(
                    "the plan has {writers} writers (0 to {}), not writer {writer}",
                    writers - 1
                )));
            }
            Ok(report)
        }
        SetStep::Commit | SetStep::Abort => {
            request.run_step::<tensorfile::TensorRef<'_>>(None, &[])
        }
    }
}

impl ShardRequest {
    /// Runs the request's `step` on the set at `out_dir` (a directory, or
    /// a store's prefix: `s3://`, `gs://`, `az://`, staged by
    /// `tensorfile_remote::stage::BucketStage`) with the plan and the
    /// tensors given rather than read from `input`: the one way every
    /// front end runs a step ([`shard`] after reading `input`, the Python
    /// package with its own tensors).
    ///
    /// `plan` is the plan to stage, for [`SetStep::Plan`] only (its own
    /// writers count; the step's is not used); `tensors` hold the tensors
    /// of the files of the writer, for [`SetStep::WritePart`] (others are
    /// ignored; a writer the plan gives no file writes nothing). As the CLI's steps, a set already at `out_dir` is refused
    /// by the plan (`replace` is for the one-shot split only).
    ///
    /// # Errors
    /// No `step`, or a plan missing for [`SetStep::Plan`] or given for
    /// another step ([`Error::Request`]); otherwise [`StagedSet`]'s errors for the step (another plan staged,
    /// the set's names taken, nothing staged, a part that fails the
    /// commit's checks) or the store's.
    pub fn run_step<T: tensorfile::TensorData>(
        &self,
        plan: Option<StagedPlan>,
        tensors: &[T],
    ) -> Result<ShardReport> {
        check_prefix(&self.prefix)?;
        let Some(step) = self.step else {
            return Err(Error::request("no step of a set to run"));
        };
        match (&step, &plan) {
            (SetStep::Plan { .. }, None) => {
                return Err(Error::request("the plan step needs a plan to stage"))
            }
            (SetStep::Plan { .. }, Some(_)) | (_, None) => {}
            (_, Some(_)) => return Err(Error::request("only the plan step takes a plan")),
        }
        if let Some(url) = crate::bucket::store_url(&self.out_dir) {
            return bucket_step(self, step, plan, tensors, url);
        }
        let set = match plan {
            Some(plan) => StagedSet::prepare(&self.out_dir, plan)?,
            None => StagedSet::open(&self.out_dir, &self.prefix)?,
        };
        let staging = set.stage().staging().to_path_buf();
        run_step(self, step, &set, staging, tensors)
    }
}

/// [`ShardRequest::run_step`] for an `OUTDIR` in a bucket
/// ([`tensorfile_remote::stage::BucketStage`]).
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
fn bucket_step<T: tensorfile::TensorData>(
    request: &ShardRequest,
    step: SetStep,
    planned: Option<StagedPlan>,
    tensors: &[T],
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
fn bucket_step<T: tensorfile::TensorData>(
    _request: &ShardRequest,
    _step: SetStep,
    _planned: Option<StagedPlan>,
    _tensors: &[T],
    url: &str,
) -> Result<ShardReport> {
    Err(Error::request(format!(
        "{url}: this build cannot write to object stores (tensorfile-ops' features `s3-store`, `gcs`, `azure`)"
    )))
}

/// Runs `step` on the staged `set` (its staging area `staging`).
fn run_step<S: tensorfile_core::set::SetStage, T: tensorfile::TensorData>(
    request: &ShardRequest,
    step: SetStep,
    set: &StagedSet<S>,
    staging: PathBuf,
    tensors: &[T],
) -> Result<ShardReport> {
    let plan = set.plan();
    // The plan's tensors count, as `tensorfile shard --plan` says.
    let planned = match step {
        SetStep::Plan { .. } => plan.parts().iter().map(|p| p.tensors.len()).sum(),
        _ => 0,
    };
    let mut report = ShardReport {
        files: Vec::new(),
        index: None,
        input: matches!(step, SetStep::Plan { .. } | SetStep::WritePart { .. })
            .then(|| request.input.clone()),
        plan_id: Some(plan.id()),
        staging: Some(staging.clone()),
        step: Some(step),
        tensors: planned,
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
            let written = set.write_parts_of(writer, tensors, request.sync)?;
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
