//! Whole files: cast the float tensors of a set of tensors to one dtype and
//! save the result atomically, one tensor at a time.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use super::{CastOptions, LossTally, Losses, TensorCast};
use crate::plan::{Plan, Sink};
use crate::writer::{TensorData, TensorSpec, WriteOptions};
use crate::{Dtype, Error, Metadata, Result};

/// Source bytes converted per step: output memory stays within a few MiB
/// whatever the tensor sizes.
const CHUNK: usize = 1 << 20;

/// What [`save_converted`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertSummary {
    /// Tensors written.
    pub tensors: usize,
    /// Tensors whose dtype changed.
    pub cast: usize,
    /// Companions of quantized weights left as they were (see `quant_companions`).
    pub companions: usize,
    /// The running loss count of each cast tensor, filled in as the plan's
    /// jobs run: read [`ConvertSummary::losses`] after writing.
    pub tallies: Vec<(String, LossTally)>,
}

impl ConvertSummary {
    /// The tensors whose cast changed values beyond rounding (overflow,
    /// NaN, saturation, flush to zero), with how many, in plan order.
    pub fn losses(&self) -> Vec<(&str, Losses)> {
        losses_of(&self.tallies)
    }
}

/// The tensors of `tallies` (per cast tensor, as [`ConvertSummary`] and
/// the PyTorch conversions' reports keep them) whose cast changed values
/// beyond rounding, with how many, in order.
pub(crate) fn losses_of(tallies: &[(String, LossTally)]) -> Vec<(&str, Losses)> {
    tallies
        .iter()
        .map(|(name, tally)| (name.as_str(), tally.get()))
        .filter(|(_, l)| !l.is_empty())
        .collect()
}

/// The tensors of a quantized weight, which a dtype conversion must not
/// touch: the int4 pair `<name>.qweight` + `<name>.scales` (the format
/// page's layout) and MLX's `<name>.weight` (U32, packed) with
/// `<name>.scales`, `<name>.biases` and `<name>.global_scale` (nvfp4's F32
/// scale per expert, which MLX takes only as F32). Detected by name
/// pairing.
/// (Example: the test `quant_companions_pair_by_name` below.)
pub(crate) fn quant_companions<'a>(
    tensors: impl IntoIterator<Item = (&'a str, Dtype)>,
) -> HashSet<&'a str> {
    let dtypes: HashMap<&str, Dtype> = tensors.into_iter().collect();
    let mut kept = HashSet::new();
    for &name in dtypes.keys() {
        let Some(base) = name.strip_suffix(".scales") else {
            continue;
        };
        let packed = [
            (format!("{base}.qweight"), None),
            (format!("{base}.weight"), Some(Dtype::U32)),
        ];
        for (weight, needs) in packed {
            let Some((&weight, &wdtype)) = dtypes.get_key_value(weight.as_str()) else {
                continue;
            };
            if needs.is_some_and(|d| d != wdtype) {
                continue;
            }
            kept.extend([weight, name]);
            for companion in ["biases", "global_scale"] {
                let key = format!("{base}.{companion}");
                if let Some((&c, _)) = dtypes.get_key_value(key.as_str()) {
                    kept.insert(c);
                }
            }
        }
    }
    kept
}

/// The dtype a tensor gets when a file is converted to `to`: float tensors
/// (not C64) become `to`, and with `allow_int` so do integer tensors; BOOL,
/// C64 and quantization companions keep theirs.
pub(crate) fn converted_dtype(
    dtype: Dtype,
    to: Dtype,
    opts: CastOptions,
    companion: bool,
) -> Dtype {
    let castable = (dtype.is_float() && dtype != Dtype::C64) || (opts.allow_int && dtype.is_int());
    if companion || !castable {
        dtype
    } else {
        to
    }
}

/// What converting one tensor does (`plan_targets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The dtype the tensor is written in.
    pub dtype: Dtype,
    /// Whether it keeps its dtype as the companion of a quantized weight
    /// (only when converting to a dtype).
    pub companion: bool,
}

/// The dtype each tensor (name, dtype, shape) is written in when converting
/// to `to` (`None` keeps every dtype), as [`converted_dtype`] says with the
/// companions of [`quant_companions`]. Every cast is checked before
/// anything is written: the pair is allowed and the element count packs.
pub(crate) fn plan_targets(
    tensors: &[(&str, Dtype, &[u64])],
    to: Option<Dtype>,
    opts: CastOptions,
) -> Result<Vec<Target>> {
    let companions = quant_companions(tensors.iter().map(|&(name, dtype, _)| (name, dtype)));
    tensors
        .iter()
        .map(|&(name, dtype, shape)| {
            let companion = to.is_some() && companions.contains(name);
            let target = match to {
                Some(to) => converted_dtype(dtype, to, opts, companion),
                None => dtype,
            };
            TensorCast::new(name, dtype, shape, target, opts)?;
            Ok(Target {
                dtype: target,
                companion,
            })
        })
        .collect()
}

/// Source bytes a cast job converts: a large tensor is cut into jobs of
/// this size that run in parallel, and memory stays within a few of them.
const JOB_BYTES: u64 = 8 << 20;

/// The plan of converting `tensors` as `converted_dtype` says (`to: None`
/// copies them unchanged: a canonical rewrite), with `metadata`. Every cast
/// is checked here, before a byte is made; a value that fails while the
/// plan runs (an integer out of range) is that job's error.
///
/// Tensors that can be read anywhere are cut into jobs of a few MiB that
/// run in parallel; others ([`TensorData::seekable`] false) are streamed
/// through one [`TensorCast`] in the pieces they produce.
///
/// # Errors
/// A cast that is not allowed, or an element count the target cannot pack.
pub fn convert_plan<'a, T: TensorData<crate::Error>>(
    tensors: &'a [T],
    metadata: Option<&Metadata>,
    to: Option<Dtype>,
    opts: CastOptions,
) -> Result<(Plan<'a, Error>, ConvertSummary)> {
    let targets = targets_of(tensors, to, opts)?;
    build_plan(tensors.iter().zip(targets).collect(), metadata, opts)
}

/// [`plan_targets`] of `tensors`.
fn targets_of<T: TensorData<crate::Error>>(
    tensors: &[T],
    to: Option<Dtype>,
    opts: CastOptions,
) -> Result<Vec<Target>> {
    let described: Vec<(&str, Dtype, &[u64])> = tensors
        .iter()
        .map(|t| (t.name(), t.dtype(), t.shape()))
        .collect();
    plan_targets(&described, to, opts)
}

/// [`convert_plan`] of tensors the plan owns: each is shared by the jobs
/// that read it and dropped with the plan. For tensors that are handles
/// made on the fly (a checkpoint's, borrowing the checkpoint for `'a`).
///
/// # Errors
/// As [`convert_plan`].
#[cfg(any(feature = "pytorch", feature = "gguf"))]
pub(crate) fn convert_plan_owned<'a, T: TensorData<crate::Error> + Send + 'a>(
    tensors: Vec<T>,
    metadata: Option<&Metadata>,
    to: Option<Dtype>,
    opts: CastOptions,
) -> Result<(Plan<'a, Error>, ConvertSummary)> {
    let targets = targets_of(&tensors, to, opts)?;
    convert_plan_targeted(tensors.into_iter().zip(targets).collect(), metadata, opts)
}

/// [`convert_plan_owned`] with each tensor's target given (from
/// `plan_targets` over a larger set, such as every shard of a model, so
/// that a quantized weight's companions are known whichever shard holds
/// them). Every cast is checked here.
///
/// # Errors
/// As [`convert_plan`].
#[cfg(any(feature = "pytorch", feature = "gguf"))]
pub(crate) fn convert_plan_targeted<'a, T: TensorData<crate::Error> + Send + 'a>(
    tensors: Vec<(T, Target)>,
    metadata: Option<&Metadata>,
    opts: CastOptions,
) -> Result<(Plan<'a, Error>, ConvertSummary)> {
    build_plan(
        tensors
            .into_iter()
            .map(|(t, target)| (Arc::new(t), target))
            .collect(),
        metadata,
        opts,
    )
}

/// [`convert_plan`] over handles to tensors (`&T`, `Arc<T>`), each job
/// holding its own handle.
fn build_plan<'a, T, H>(
    tensors: Vec<(H, Target)>,
    metadata: Option<&Metadata>,
    opts: CastOptions,
) -> Result<(Plan<'a, Error>, ConvertSummary)>
where
    T: TensorData<crate::Error> + ?Sized,
    H: std::ops::Deref<Target = T> + Clone + Send + Sync + 'a,
{
    let mut summary = ConvertSummary {
        tensors: tensors.len(),
        cast: 0,
        companions: 0,
        tallies: Vec::new(),
    };
    let mut plan = Plan::with_error(metadata.cloned());
    for (i, (t, target)) in tensors.into_iter().enumerate() {
        if target.dtype == t.dtype() {
            summary.companions += usize::from(target.companion);
            plan.copy_from(t, i);
            continue;
        }
        summary.cast += 1;
        let out = plan.declare_from(TensorSpec::new(t.name(), target.dtype, t.shape()), i);
        let cast = TensorCast::new(t.name(), t.dtype(), t.shape(), target.dtype, opts)?;
        summary
            .tallies
            .push((t.name().to_string(), cast.loss_tally()));
        if !t.seekable() {
            plan.push(vec![out], move |sink: &dyn Sink<crate::Error>| {
                stream_cast(&*t, &cast, out, sink)
            });
            continue;
        }
        // Ranges of whole conversion units, converted independently.
        let unit = cast.unit_bytes() as u64;
        let step = (JOB_BYTES / unit).max(1) * unit;
        let total = cast.input_len();
        let cast = Arc::new(cast);
        let mut at = 0u64;
        loop {
            let len = (total - at).min(step);
            let cast = cast.clone();
            let t = t.clone();
            plan.push(
                vec![out],
                move |sink: &dyn Sink<crate::Error>| -> Result<()> {
                    let mut scratch = Vec::new();
                    let src = t.bytes_at(at, len as usize, &mut scratch)?;
                    let mut converted = Vec::new();
                    cast.convert_into(src, at, &mut converted)?;
                    sink.write(out, cast.output_offset(at), &converted)
                },
            );
            at += len;
            if at >= total {
                break;
            }
        }
    }
    Ok((plan, summary))
}

/// Casts a tensor that is best read in its own pieces, in one pass.
fn stream_cast<T: TensorData<crate::Error> + ?Sized>(
    t: &T,
    cast: &TensorCast,
    out: usize,
    sink: &dyn Sink<crate::Error>,
) -> Result<()> {
    let mut cast = cast.clone();
    let mut converted = Vec::new();
    let mut written = 0u64;
    t.produce(&mut |_, piece| {
        for chunk in piece.chunks(CHUNK) {
            converted.clear();
            cast.push(chunk, &mut converted)?;
            sink.write(out, written, &converted)?;
            written += converted.len() as u64;
        }
        Ok(())
    })?;
    cast.finish()
}

/// Saves `tensors` and `metadata` to `path` atomically, with the tensors
/// cast as `converted_dtype` says (`to: None` writes them unchanged: a
/// canonical rewrite): [`convert_plan`] written by
/// [`save_plan`](crate::save_plan). Every cast is checked before anything
/// is written; a value that fails during the write (an integer out of
/// range) aborts the save and leaves `path` as it was. Memory stays
/// bounded: tensors go through in pieces.
///
/// # Errors
/// As [`convert_plan`], or a failed write (naming `path`).
pub fn save_converted<T: TensorData<crate::Error>>(
    path: impl AsRef<Path>,
    tensors: &[T],
    metadata: Option<&Metadata>,
    to: Option<Dtype>,
    opts: CastOptions,
    write: &WriteOptions,
) -> Result<ConvertSummary> {
    let (plan, summary) = convert_plan(tensors, metadata, to, opts)?;
    crate::save_plan(path, &plan, write, &())?;
    Ok(summary)
}

#[cfg(test)]
mod companion_tests {
    use super::quant_companions;
    use crate::Dtype;

    // Was this function's doctest while it was public.
    #[test]
    fn quant_companions_pair_by_name() {
        let t = [
            ("a.qweight", Dtype::U8),
            ("a.scales", Dtype::F16),
            ("m.weight", Dtype::U32),
            ("m.scales", Dtype::F32),
            ("m.biases", Dtype::F32),
            ("e.weight", Dtype::U32),
            ("e.scales", Dtype::U8),
            ("e.global_scale", Dtype::F32),
            ("n.weight", Dtype::F32),
            ("n.scales", Dtype::F32), // not packed: plain floats
        ];
        let kept = quant_companions(t.iter().copied());
        assert_eq!(kept.len(), 8);
        assert!(!kept.contains("n.scales"));
    }
}
