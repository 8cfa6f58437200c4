//! Interprets the recorded calls of torch's tensor rebuild functions
//! (`_rebuild_tensor_v2`, `_v3`, `_rebuild_parameter`, ...) as tensor views
//! over storages, without calling anything.

use std::collections::HashMap;

use crate::dtypes::TorchDtype;
use crate::error::{Error, Result};
use crate::globals::Global;
use crate::pickle::{ObjId, Object, Pickle, Value};
use crate::view::View;

/// A storage as a persistent id describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StorageRef {
    /// The key: the record `data/<key>` in a zip, an id in a legacy file.
    pub key: String,
    /// The element type the storage is used with.
    pub dtype: TorchDtype,
    /// Its length in bytes, as the persistent id says.
    pub nbytes: u64,
    /// What the persistent id literally said, for messages: `6 elements x 4 B`.
    pub declared: String,
}

/// A tensor: a view over one storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TensorSpec {
    /// Index into [`Rebuilder::storages`].
    pub storage: usize,
    /// Element type.
    pub dtype: TorchDtype,
    /// Storage offset, in elements.
    pub offset: u64,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Strides, in elements.
    pub strides: Vec<u64>,
}

/// Builds tensor specs from rebuild calls, sharing storages by key.
pub(crate) struct Rebuilder<'p> {
    pickle: &'p Pickle,
    pub storages: Vec<StorageRef>,
    by_key: HashMap<String, usize>,
    pub specs: Vec<TensorSpec>,
    by_object: HashMap<ObjId, usize>,
    max_expanded: u64,
}

/// How many wrappers (`_rebuild_parameter` around `_rebuild_from_type_v2`
/// around `_rebuild_tensor_v2` ...) may nest. Torch uses at most two.
const MAX_WRAPPING: usize = 8;

impl<'p> Rebuilder<'p> {
    /// `max_expanded` caps the byte size of views larger than their storage
    /// (stride-0 expansions), which materialize more bytes than the file holds.
    pub fn new(pickle: &'p Pickle, max_expanded: u64) -> Rebuilder<'p> {
        Rebuilder {
            max_expanded,
            pickle,
            storages: Vec::new(),
            by_key: HashMap::new(),
            specs: Vec::new(),
            by_object: HashMap::new(),
        }
    }

    /// Whether this global builds a tensor.
    pub fn is_rebuild(g: Global) -> bool {
        matches!(
            g,
            Global::RebuildTensorV2
                | Global::RebuildTensorV3
                | Global::RebuildParameter
                | Global::RebuildParameterWithState
                | Global::RebuildFromTypeV2
        )
    }

    /// The spec of the tensor that call object `id` builds; `name` is used
    /// in errors. The same object always gives the same spec index.
    pub fn tensor(&mut self, id: ObjId, name: &str) -> Result<usize> {
        if let Some(&i) = self.by_object.get(&id) {
            return Ok(i);
        }
        let bad = |reason: String| Error::Tensor {
            name: name.to_string(),
            reason,
        };
        let pickle = self.pickle;
        let Some((mut func, mut args)) = pickle.call(Value::Ref(id)) else {
            return Err(bad("not a tensor rebuild call".into()));
        };
        for _ in 0..MAX_WRAPPING {
            match func {
                Global::RebuildTensorV2 | Global::RebuildTensorV3 => {
                    let spec = self.view(func, args, name)?;
                    self.specs.push(spec);
                    self.by_object.insert(id, self.specs.len() - 1);
                    return Ok(self.specs.len() - 1);
                }
                // (data, requires_grad, backward_hooks[, state]): unwrap data.
                Global::RebuildParameter | Global::RebuildParameterWithState => {
                    let data = args.first().copied().unwrap_or(Value::None);
                    match pickle.call(data) {
                        Some((f, a)) if Self::is_rebuild(f) => {
                            (func, args) = (f, a);
                        }
                        _ => {
                            return Err(bad(format!(
                                "{func:?} wraps {}, not a tensor",
                                pickle.kind(data)
                            )))
                        }
                    }
                }
                // (func, new_type, args, state): call func(*args), then
                // cast to new_type (Tensor or Parameter: same data).
                Global::RebuildFromTypeV2 => {
                    let [f, new_type, a, ..] = args else {
                        return Err(bad(format!(
                            "_rebuild_from_type_v2 with {} arguments",
                            args.len()
                        )));
                    };
                    match pickle.deref(*new_type) {
                        Some(Object::Global(Global::Tensor | Global::Parameter)) => {}
                        _ => {
                            return Err(bad(format!(
                                "_rebuild_from_type_v2 to {}, not torch.Tensor or Parameter",
                                pickle.kind(*new_type)
                            )))
                        }
                    }
                    match (pickle.deref(*f), pickle.as_seq(*a)) {
                        (Some(Object::Global(g)), Some(a)) if Self::is_rebuild(*g) => {
                            (func, args) = (*g, a);
                        }
                        _ => {
                            return Err(bad(format!(
                                "_rebuild_from_type_v2 of {}, not a tensor rebuild function",
                                pickle.kind(*f)
                            )))
                        }
                    }
                }
                other => return Err(bad(format!("{other:?} does not build a tensor"))),
            }
        }
        Err(bad("tensor rebuild calls nested too deeply".into()))
    }

    /// `_rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
    /// hooks[, metadata])` or `_v3(..., hooks, dtype[, metadata])`; the
    /// legacy `_rebuild_tensor(storage, offset, size, stride)` too.
    fn view(&mut self, func: Global, args: &[Value], name: &str) -> Result<TensorSpec> {
        let bad = |reason: String| Error::Tensor {
            name: name.to_string(),
            reason,
        };
        let pickle = self.pickle;
        let v3 = func == Global::RebuildTensorV3;
        let (min, max) = if v3 { (7, 8) } else { (4, 7) };
        if args.len() < min || args.len() > max {
            return Err(bad(format!("{func:?} with {} arguments", args.len())));
        }
        let metadata = args.get(if v3 { 7 } else { 6 }).copied();
        if let Some(m) = metadata {
            self.check_metadata(m, name)?;
        }
        let tensor_dtype = if v3 {
            match pickle.deref(args[6]) {
                Some(Object::Global(Global::Dtype(d))) => Some(*d),
                _ => {
                    return Err(bad(format!(
                        "dtype argument is {}, not a torch dtype",
                        pickle.kind(args[6])
                    )))
                }
            }
        } else {
            None
        };
        let (storage, view_offset, view_size) = self.storage(args[0], tensor_dtype, name)?;
        let dtype = self.storages[storage].dtype;
        if let Err(why) = dtype.to_safetensors() {
            return Err(Error::Refused {
                name: name.to_string(),
                reason: why.to_string(),
            });
        }
        let offset = self.uint(args[1], "storage offset").map_err(bad)?;
        let shape = self.uints(args[2], "size").map_err(bad)?;
        let strides = self.uints(args[3], "stride").map_err(bad)?;
        let elem = dtype.element_size();
        let storage_numel = self.storages[storage].nbytes / elem;
        let view = View {
            offset,
            shape: &shape,
            strides: &strides,
            elem,
        };
        // (A byte count that overflows is refused by `check` below.)
        if let Some(nbytes) = view.nbytes() {
            if nbytes > self.storages[storage].nbytes && nbytes > self.max_expanded {
                return Err(Error::Budget {
                    budget: "max_expanded_bytes",
                    limit: self.max_expanded,
                    needed: nbytes,
                    context: format!(
                        "tensor {name:?}: an expanded view over a storage of {} B would be materialized",
                        self.storages[storage].nbytes
                    ),
                });
            }
        }
        // Legacy storage views: the tensor indexes a window of the root storage.
        let offset = match view_size {
            Some(size) => {
                view.check(size).map_err(bad)?;
                let end = view_offset.checked_add(size);
                if end.is_none_or(|e| e > storage_numel) {
                    return Err(bad(format!(
                        "legacy storage view [{view_offset}, +{size}) is outside its storage of {storage_numel} elements"
                    )));
                }
                offset + view_offset
            }
            None => {
                view.check(storage_numel).map_err(bad)?;
                offset
            }
        };
        Ok(TensorSpec {
            storage,
            dtype,
            offset,
            shape,
            strides,
        })
    }

    /// Refuses conjugate and negative bits (and any other set flag).
    fn check_metadata(&self, m: Value, name: &str) -> Result<(), Error> {
        let refused = |reason: &str| Error::Refused {
            name: name.to_string(),
            reason: reason.to_string(),
        };
        let bad = |reason: String| Error::Tensor {
            name: name.to_string(),
            reason,
        };
        let pickle = self.pickle;
        match pickle.deref(m) {
            None if m == Value::None => Ok(()),
            Some(Object::Dict(items)) => {
                for (k, v) in items {
                    let key = pickle.as_str(*k).unwrap_or("?");
                    let set = !matches!(v, Value::Bool(false) | Value::None);
                    match key {
                        "conj" if set => {
                            return Err(refused("conjugate-bit tensor (metadata {'conj': True}) is refused; call .resolve_conj() before saving"))
                        }
                        "neg" if set => {
                            return Err(refused("negative-bit tensor (metadata {'neg': True}) is refused; call .resolve_neg() before saving"))
                        }
                        "conj" | "neg" => {}
                        other => return Err(refused(&format!("unsupported tensor metadata {other:?}"))),
                    }
                }
                Ok(())
            }
            _ => Err(bad(format!(
                "tensor metadata is {}, not a dict",
                pickle.kind(m)
            ))),
        }
    }

    /// Registers the storage a persistent id names; returns its index and,
    /// for legacy storage views, the view's offset and size.
    fn storage(
        &mut self,
        pid: Value,
        tensor_dtype: Option<TorchDtype>,
        name: &str,
    ) -> Result<(usize, u64, Option<u64>)> {
        let pickle = self.pickle;
        let bad = |reason: String| Error::Tensor {
            name: name.to_string(),
            reason,
        };
        let Some(Object::PersistentId(pid)) = pickle.deref(pid) else {
            return Err(bad(format!(
                "storage argument is {}, not a persistent id",
                pickle.kind(pid)
            )));
        };
        let items = pickle.as_seq(*pid).ok_or_else(|| {
            bad(format!(
                "persistent id is {}, not a tuple",
                pickle.kind(*pid)
            ))
        })?;
        let (tag, cls, key, numel, view_meta) = match items {
            [tag, cls, key, _location, numel] => (tag, cls, key, numel, None),
            [tag, cls, key, _location, numel, view] => (tag, cls, key, numel, Some(*view)),
            _ => {
                return Err(bad(format!(
                    "persistent id has {} fields, expected 5 or 6",
                    items.len()
                )))
            }
        };
        if pickle.as_str(*tag) != Some("storage") {
            return Err(bad("persistent id does not start with 'storage'".into()));
        }
        let key = pickle
            .as_str(*key)
            .ok_or_else(|| bad(format!("storage key is {}, not a str", pickle.kind(*key))))?
            .to_string();
        let numel = self.uint(*numel, "storage size").map_err(bad)?;
        let (dtype, nbytes, declared) = match (pickle.deref(*cls), tensor_dtype) {
            (Some(Object::Global(Global::TypedStorage(d))), None) => {
                let e = d.element_size();
                let nbytes = numel
                    .checked_mul(e)
                    .ok_or_else(|| bad(format!("storage of {numel} elements overflows")))?;
                (*d, nbytes, format!("{numel} elements x {e} B = {nbytes} B"))
            }
            (Some(Object::Global(Global::UntypedStorage)), Some(d)) => {
                (d, numel, format!("{numel} B"))
            }
            (Some(Object::Global(Global::TypedStorage(d))), Some(_)) => {
                return Err(bad(format!(
                    "_rebuild_tensor_v3 with a typed storage ({})",
                    d.torch_name()
                )))
            }
            (Some(Object::Global(Global::UntypedStorage)), None) => {
                return Err(bad(
                    "an UntypedStorage without a dtype (needs _rebuild_tensor_v3)".into(),
                ))
            }
            _ => return Err(bad(format!("storage class is {}", pickle.kind(*cls)))),
        };
        if nbytes % dtype.element_size() != 0 {
            return Err(bad(format!(
                "storage {key:?} of {nbytes} B is not a whole number of {} elements",
                dtype.torch_name()
            )));
        }
        let (view_offset, view_size) = match view_meta {
            None | Some(Value::None) => (0, None),
            Some(v) => match pickle.as_seq(v) {
                Some([_view_key, off, size]) => (
                    self.uint(*off, "storage view offset").map_err(bad)?,
                    Some(self.uint(*size, "storage view size").map_err(bad)?),
                ),
                _ => return Err(bad(format!("storage view metadata is {}", pickle.kind(v)))),
            },
        };
        let index = match self.by_key.get(&key) {
            Some(&i) => {
                let s = &self.storages[i];
                if s.dtype != dtype {
                    return Err(Error::DtypeConflict {
                        key,
                        first: s.dtype.torch_name(),
                        second: dtype.torch_name(),
                        tensor: name.to_string(),
                    });
                }
                if s.nbytes != nbytes {
                    return Err(Error::Storage {
                        key,
                        problem: format!(
                            "persistent ids disagree on its size ({} and {declared})",
                            s.declared
                        ),
                    });
                }
                i
            }
            None => {
                self.storages.push(StorageRef {
                    key: key.clone(),
                    dtype,
                    nbytes,
                    declared,
                });
                self.by_key.insert(key, self.storages.len() - 1);
                self.storages.len() - 1
            }
        };
        Ok((index, view_offset, view_size))
    }

    fn uint(&self, v: Value, what: &str) -> Result<u64, String> {
        match v {
            Value::Int(i) if i >= 0 => Ok(i as u64),
            _ => Err(format!(
                "{what} is {}, not a non-negative int",
                self.pickle.kind(v)
            )),
        }
    }

    /// A tuple of non-negative ints (also `torch.Size(tuple)`).
    fn uints(&self, v: Value, what: &str) -> Result<Vec<u64>, String> {
        let pickle = self.pickle;
        let items = match pickle.call(v) {
            Some((Global::Size, args)) => args.first().and_then(|a| pickle.as_seq(*a)),
            _ => pickle.as_seq(v),
        }
        .ok_or_else(|| format!("{what} is {}, not a tuple", pickle.kind(v)))?;
        items.iter().map(|&i| self.uint(i, what)).collect()
    }
}

/// The element size of every storage a legacy object pickle's persistent
/// ids name (`('storage', FloatStorage, key, location, numel[, view])`),
/// whether the tensors kept use it or not: the raw data of every listed
/// storage must be skipped to reach the next. An untyped storage counts
/// bytes. Refuses one key named with two element sizes.
pub(crate) fn legacy_element_sizes(pickle: &Pickle) -> Result<HashMap<String, u64>> {
    let mut sizes: HashMap<String, u64> = HashMap::new();
    for object in pickle.objects() {
        let Object::PersistentId(pid) = object else {
            continue;
        };
        let Some(items) = pickle.as_seq(*pid) else {
            continue;
        };
        let (Some(tag), Some(cls), Some(key)) = (items.first(), items.get(1), items.get(2)) else {
            continue;
        };
        if pickle.as_str(*tag) != Some("storage") {
            continue;
        }
        let Some(key) = pickle.as_str(*key) else {
            continue;
        };
        let elem = match pickle.deref(*cls) {
            Some(Object::Global(Global::TypedStorage(d))) => d.element_size(),
            Some(Object::Global(Global::UntypedStorage)) => 1,
            _ => continue,
        };
        match sizes.get(key) {
            Some(&e) if e != elem => {
                return Err(Error::Storage {
                    key: key.to_string(),
                    problem: format!(
                        "persistent ids name it with elements of {e} B and of {elem} B"
                    ),
                })
            }
            Some(_) => {}
            None => {
                sizes.insert(key.to_string(), elem);
            }
        }
    }
    Ok(sizes)
}
