//! What the transforms of safetensors (rewrite, convert, quantize,
//! dequantize: the CLI's commands and the Python package's functions) read
//! and write: a file or a set in, a file or a set out, through the
//! library's plans. PyTorch checkpoints and `.bin` sets come in through
//! their own loader and go out through the same [`write_to`].

use std::path::{Path, PathBuf};

use tensorfile::set::ShardedTensors;
use tensorfile::InputKind as Kind;
use tensorfile::{Error, Progress, Result};
use tensorfile_core::plan::Plan;
use tensorfile_core::set::SetTensor;
use tensorfile_core::set::{save_set, Sharding};
use tensorfile_core::{save_plan, Metadata, ReadOptions, WriteOptions};

/// A safetensors input, file or set, read with positional reads (a file
/// truncated underneath is an error naming it, never a signal).
pub struct TransformInput {
    kind: Kind,
    set: ShardedTensors,
}

impl TransformInput {
    /// Opens `path`, which [`tensorfile::probe`] found to be `kind` (a
    /// safetensors file or set: the caller refuses other kinds in its own
    /// words).
    ///
    /// # Errors
    /// The file or a shard cannot be read or breaks the format, or the set
    /// is inconsistent.
    pub fn open(path: &Path, kind: Kind, read: &ReadOptions) -> Result<TransformInput> {
        let set = ShardedTensors::open_pread(path, read)?;
        Ok(TransformInput::new(kind, set))
    }

    /// The input `set`, opened as `kind` by the caller (from a remote
    /// location, say).
    pub fn new(kind: Kind, set: ShardedTensors) -> TransformInput {
        TransformInput { kind, set }
    }

    /// Whether the input is a set of files (an index, or a directory
    /// holding one): the output is then a directory. A directory holding a
    /// single `model.safetensors` is read as that file.
    pub fn is_set(&self) -> bool {
        self.kind.is_set() && (self.set.is_indexed() || self.set.shards().len() > 1)
    }

    /// Every tensor, shard by shard, read on demand.
    pub fn tensors(&self) -> Vec<SetTensor<'_>> {
        self.set.tensor_data()
    }

    /// The metadata: the file's, or the union of the shards' (a key with
    /// two values is an error naming both shards).
    ///
    /// # Errors
    /// Shards whose metadata disagree.
    pub fn metadata(&self) -> Result<Option<Metadata>> {
        let m = self.set.metadata()?;
        Ok((!m.is_empty()).then_some(m))
    }

    /// The files the input is made of (shards and index), which no output
    /// may be.
    pub fn files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = self.set.shards().iter().map(|s| s.path()).collect();
        files.extend(self.set.index_path());
        files
    }

    /// Where `tensors` (from [`TransformInput::tensors`]) lie: what [`write_to`]
    /// needs.
    pub fn layout(&self, tensors: &[SetTensor<'_>]) -> Layout {
        let shards = self.set.shards();
        Layout {
            is_set: self.is_set(),
            shard_of: tensors
                .iter()
                .map(|t| {
                    shards
                        .iter()
                        .position(|s| std::ptr::eq(s, t.shard()))
                        .unwrap_or(0)
                })
                .collect(),
            shards: shards.len(),
            prefix: self.prefix(),
        }
    }

    /// The file name prefix of the set's shards (`model` for
    /// `model-00001-of-00002.safetensors`, diffusers' own name for theirs).
    fn prefix(&self) -> String {
        let name = self
            .set
            .index_path()
            .or_else(|| self.set.shards().first().map(|s| s.path()))
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = name
            .strip_suffix(".safetensors.index.json")
            .or_else(|| name.strip_suffix(".safetensors"))
            .unwrap_or(&name);
        // A shard's own name: model-00001-of-00002.
        match stem
            .rsplit_once("-of-")
            .and_then(|(head, _)| head.rsplit_once('-'))
        {
            Some((prefix, _)) if self.set.shards().len() > 1 => prefix.to_string(),
            _ if stem.is_empty() => "model".to_string(),
            _ => stem.to_string(),
        }
    }
}

/// What was written.
#[derive(Debug, Clone)]
pub struct Written {
    /// The files, in order (one for a single output).
    pub files: Vec<PathBuf>,
    /// The index of a set of several files.
    pub index: Option<PathBuf>,
    /// Bytes in all the files written.
    pub bytes: u64,
}

/// Where a plan's inputs lie, whatever they were read from (safetensors
/// files, PyTorch checkpoints): what it takes to write the output as a
/// file, or as a set with one output shard per input shard.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Whether the input is a set of files: the output is then a directory.
    pub is_set: bool,
    /// Per input of the plan (its [`Plan::origin`]), the input shard it
    /// comes from.
    pub shard_of: Vec<usize>,
    /// How many input shards.
    pub shards: usize,
    /// The file name prefix of the output set's shards.
    pub prefix: String,
}

/// Writes what `plan` (built over `tensors` of `input`) produces to `out`,
/// as [`write_to`] does.
///
/// # Errors
/// As [`write_to`].
pub fn write(
    input: &TransformInput,
    tensors: &[SetTensor<'_>],
    plan: &Plan<'_, Error>,
    out: &Path,
    max_shard_size: Option<u64>,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<Written> {
    write_to(
        &input.layout(tensors),
        plan,
        out,
        max_shard_size,
        options,
        progress,
    )
}

/// Writes what `plan` produces to `out`: one file for a file, a set in the
/// directory `out` for a set (one output shard per input shard, or cut by
/// `max_shard_size`, which also makes a set of a file's output), all or
/// nothing. `progress` is told the data bytes written as they go.
///
/// # Errors
/// A tensor that cannot be read or produced, or a failed write (nothing
/// is left behind).
pub fn write_to(
    layout: &Layout,
    plan: &Plan<'_, Error>,
    out: &Path,
    max_shard_size: Option<u64>,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<Written> {
    if !layout.is_set && max_shard_size.is_none() {
        save_plan(out, plan, options, progress)?;
        let bytes = file_size(out)?;
        return Ok(Written {
            files: vec![out.to_path_buf()],
            index: None,
            bytes,
        });
    }
    let sharding = Sharding::new(max_shard_size, plan, &layout.shard_of, layout.shards);
    let summary = save_set(out, &layout.prefix, plan, &sharding, options, progress)?;
    let mut bytes = 0;
    for f in summary.files.iter().chain(&summary.index) {
        bytes += file_size(f)?;
    }
    Ok(Written {
        files: summary.files,
        index: summary.index,
        bytes,
    })
}

fn file_size(path: &Path) -> Result<u64> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    Ok(meta.len())
}

/// The files of an operation that reads one input and writes one output
/// (rewrite, convert, quantize, dequantize), and how: the options every
/// such request shares.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct InOut {
    /// The input: a file, an index or a model directory, local or at a URL
    /// (`s3://`, `hf://`, `http(s)://`; headers are read first).
    pub input: PathBuf,
    /// The file to write (replaced atomically), or the directory to write
    /// a set into when the input is a set or `max_shard_size` is given.
    pub output: PathBuf,
    /// Write the output as a set cut into shards of at most this many data
    /// bytes. Default for a set: one output shard per input shard.
    pub max_shard_size: Option<u64>,
    /// Largest header length accepted in the input and written to the
    /// output, in bytes.
    pub max_header_len: u64,
    /// Sync the output and its directory to disk (the replacement is
    /// atomic either way).
    pub sync: bool,
    /// One deadline, in seconds, for all of the input's remote reads,
    /// retries and waits included; `None`: none.
    pub timeout: Option<f64>,
    /// For an output at a store URL (`s3://`, `gs://`, `az://`): replace
    /// an object (or a set's index or shards) already there; without it
    /// they are refused. Not atomic for concurrent readers.
    pub replace: bool,
}

impl Default for InOut {
    fn default() -> InOut {
        InOut {
            input: PathBuf::new(),
            output: PathBuf::new(),
            max_shard_size: None,
            max_header_len: tensorfile_core::DEFAULT_MAX_HEADER_LEN,
            sync: true,
            timeout: None,
            replace: false,
        }
    }
}

impl InOut {
    /// Runs `run` with this request's output made local: itself, or for
    /// a store URL a temporary path uploaded when `run` succeeds (see
    /// `bucket.rs`, its bytes a further stage of `progress`); `remap` gives
    /// the report the URLs back.
    pub(crate) fn via_local<R>(
        &self,
        progress: &dyn Progress,
        run: impl FnOnce(&InOut) -> Result<R>,
        remap: impl FnOnce(&mut R, &dyn Fn(&Path) -> PathBuf),
    ) -> Result<R> {
        crate::bucket::via_local(
            &self.output,
            self.replace,
            progress,
            |local| {
                let mut io = self.clone();
                io.output = local.to_path_buf();
                run(&io)
            },
            remap,
        )
    }

    /// `input` read into `output`, with the default options.
    pub fn new(input: impl Into<PathBuf>, output: impl Into<PathBuf>) -> InOut {
        InOut {
            input: input.into(),
            output: output.into(),
            ..InOut::default()
        }
    }

    /// How the input is read.
    pub fn read_options(&self) -> ReadOptions {
        ReadOptions::default().max_header_len(self.max_header_len)
    }

    /// How the output is written (canonical padding).
    pub fn write_options(&self) -> WriteOptions {
        WriteOptions::default()
            .with_max_header_len(self.max_header_len)
            .with_sync(self.sync)
    }

    /// How inputs are opened: local files with positional reads (a file
    /// truncated underneath is an error, not a signal), URLs within
    /// [`InOut::timeout`].
    ///
    /// # Errors
    /// A timeout that is not a positive number of seconds
    /// ([`Error::Request`]).
    pub fn open_options(&self) -> Result<tensorfile::OpenOptions> {
        open_options(&self.read_options(), self.timeout)
    }

    /// Opens the input, refusing one that is not a safetensors file or set
    /// (saying what it is, and what to do instead).
    ///
    /// # Errors
    /// The input cannot be read, is not safetensors, or breaks the format.
    pub fn open_safetensors(&self) -> Result<TransformInput> {
        let options = self.open_options()?;
        let kind = tensorfile::probe(&self.input)?.kind();
        if !kind.is_safetensors() {
            return Err(not_safetensors(&self.input, kind));
        }
        Ok(TransformInput::new(
            kind,
            tensorfile::open_set(&self.input, &options)?,
        ))
    }

    /// Refuses to write the output when it is one of `inputs` (the same
    /// file by device and inode, whatever its name).
    ///
    /// # Errors
    /// The output is one of the inputs.
    pub fn refuse_input_as_output<P: AsRef<Path>>(
        &self,
        inputs: impl IntoIterator<Item = P>,
    ) -> Result<()> {
        Ok(tensorfile_core::atomic::check_not_input(
            &self.output,
            inputs,
        )?)
    }

    /// Writes what `plan` produces to the output as [`write_to`] does,
    /// telling `progress` its total first.
    ///
    /// # Errors
    /// As [`write_to`].
    pub fn write(
        &self,
        layout: &Layout,
        plan: &Plan<'_, Error>,
        progress: &dyn Progress,
    ) -> Result<Written> {
        self.write_with(layout, plan, &self.write_options(), progress)
    }

    /// [`InOut::write`] with write options of the caller's (an alignment,
    /// say).
    ///
    /// # Errors
    /// As [`write_to`].
    pub fn write_with(
        &self,
        layout: &Layout,
        plan: &Plan<'_, Error>,
        options: &WriteOptions,
        progress: &dyn Progress,
    ) -> Result<Written> {
        progress.total(plan.data_len()?);
        write_to(
            layout,
            plan,
            &self.output,
            self.max_shard_size,
            options,
            progress,
        )
    }
}

/// How an operation opens its inputs: local files with positional reads
/// (a file truncated underneath is an error, not a signal), URLs within
/// `timeout` seconds (through a client of their own).
///
/// # Errors
/// A timeout that is not a positive number of seconds ([`Error::Request`]).
pub(crate) fn open_options(
    read: &ReadOptions,
    timeout: Option<f64>,
) -> Result<tensorfile::OpenOptions> {
    let options = tensorfile::OpenOptions::default()
        .with_read(read.clone())
        .with_map(false);
    let Some(seconds) = timeout else {
        return Ok(options);
    };
    let budget = Some(seconds)
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| {
            Error::request(format!(
                "timeout {seconds}: not a positive number of seconds"
            ))
        })?;
    #[cfg(feature = "remote")]
    let options = options.with_client(tensorfile_remote::Client::new(
        tensorfile_remote::RemoteOptions::default().with_time_budget(Some(budget)),
    ));
    #[cfg(not(feature = "remote"))]
    let _ = budget;
    Ok(options)
}

/// Why an operation that reads safetensors does not take an input of
/// `kind`, and what to do instead.
pub(crate) fn not_safetensors(path: &Path, kind: Kind) -> Error {
    Error::io(
        path,
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "this is {kind}, not safetensors; `tensorfile convert` turns it into safetensors"
            ),
        ),
    )
}

impl Written {
    /// Records every tensor's sha256 in the metadata of each file written
    /// (see [`tensorfile::digest::embed_hashes`]), and counts the bytes again.
    ///
    /// # Errors
    /// A file cannot be read or written again.
    #[cfg(feature = "digest")]
    pub fn embed_hashes(&mut self, options: &WriteOptions) -> Result<()> {
        for f in &self.files {
            tensorfile::digest::embed_hashes(f, options)?;
        }
        self.bytes = 0;
        for f in self.files.iter().chain(&self.index) {
            self.bytes += file_size(f)?;
        }
        Ok(())
    }
}

/// `Option<Dtype>` as its name in requests (`"BF16"`), read back with
/// [`Dtype::from_name`]; any case is taken.
pub(crate) mod dtype_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use tensorfile_core::Dtype;

    pub fn serialize<S: Serializer>(dtype: &Option<Dtype>, s: S) -> Result<S::Ok, S::Error> {
        match dtype {
            Some(d) => s.serialize_some(d.name()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Dtype>, D::Error> {
        let name: Option<String> = Option::deserialize(d)?;
        name.map(|n| {
            Dtype::from_name_ignore_case(&n)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown dtype {n:?}")))
        })
        .transpose()
    }
}

/// `Option<Mode>` as its MLX name in requests (`"mxfp4"`).
pub(crate) mod mode_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use tensorfile::quant::Mode;

    pub fn serialize<S: Serializer>(mode: &Option<Mode>, s: S) -> Result<S::Ok, S::Error> {
        match mode {
            Some(m) => s.serialize_some(m.name()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Mode>, D::Error> {
        let name: Option<String> = Option::deserialize(d)?;
        name.map(|n| n.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}
