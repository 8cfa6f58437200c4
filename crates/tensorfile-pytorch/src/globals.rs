//! The allow-list of pickle globals: the only names a checkpoint may refer
//! to. They are recognized and recorded, never imported or called.
//!
//! Every name here is on the allow-list of torch's own restricted
//! unpickler (`torch/_weights_only_unpickler.py`, `_get_allowed_globals`,
//! torch 2.15), spelled as it spells it (`torch.storage.UntypedStorage`,
//! `torch.nn.parameter.Parameter`, `torch.float16` but not `torch.half`):
//! a checkpoint `torch.load(weights_only=True)` refuses is refused here.

use crate::dtypes::TorchDtype;

/// An allow-listed global.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Global {
    /// `torch._utils._rebuild_tensor` (legacy, without requires_grad) and
    /// `_rebuild_tensor_v2`.
    RebuildTensorV2,
    /// `torch._utils._rebuild_tensor_v3` (untyped storage plus a dtype argument).
    RebuildTensorV3,
    /// `torch._utils._rebuild_parameter`.
    RebuildParameter,
    /// `torch._utils._rebuild_parameter_with_state`.
    RebuildParameterWithState,
    /// `torch._tensor._rebuild_from_type_v2`.
    RebuildFromTypeV2,
    /// A legacy typed storage class such as `torch.FloatStorage`.
    TypedStorage(TorchDtype),
    /// `torch.storage.UntypedStorage` (its dtype comes from the tensor).
    UntypedStorage,
    /// `collections.OrderedDict`.
    OrderedDict,
    /// `torch.Size`.
    Size,
    /// `torch.device`.
    Device,
    /// A dtype object such as `torch.float32`.
    Dtype(TorchDtype),
    /// `torch.Tensor` (a type name passed to `_rebuild_from_type_v2`).
    Tensor,
    /// `torch.nn.Parameter` (likewise).
    Parameter,
}

impl Global {
    /// The allow-listed global `module.name`, or, when it is not allowed, a
    /// short reason to add to the error when the global is a known torch
    /// feature that safetensors cannot represent.
    pub fn resolve(module: &str, name: &str) -> Result<Global, Option<&'static str>> {
        Ok(match (module, name) {
            ("torch._utils", "_rebuild_tensor_v2" | "_rebuild_tensor") => Global::RebuildTensorV2,
            ("torch._utils", "_rebuild_tensor_v3") => Global::RebuildTensorV3,
            ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
            ("torch._utils", "_rebuild_parameter_with_state") => Global::RebuildParameterWithState,
            ("torch._tensor", "_rebuild_from_type_v2") => Global::RebuildFromTypeV2,
            ("torch.storage", "UntypedStorage") => Global::UntypedStorage,
            ("collections", "OrderedDict") => Global::OrderedDict,
            ("torch", "Size") => Global::Size,
            ("torch", "device") => Global::Device,
            ("torch", "Tensor") => Global::Tensor,
            ("torch.nn.parameter", "Parameter") => Global::Parameter,
            ("torch" | "torch.cuda", n) if TorchDtype::from_storage_class(n).is_some() => {
                Global::TypedStorage(TorchDtype::from_storage_class(n).ok_or(None)?)
            }
            // Only the dtype's own name (`torch.float32`), as torch's
            // allow-list spells it: not an alias (`torch.float`).
            ("torch", n) if TorchDtype::from_torch_name(n).is_some_and(|d| d.torch_name() == n) => {
                Global::Dtype(TorchDtype::from_torch_name(n).ok_or(None)?)
            }
            _ => return Err(refusal_hint(module, name)),
        })
    }
}

/// Why some well-known torch globals are refused.
fn refusal_hint(module: &str, name: &str) -> Option<&'static str> {
    match (module, name) {
        ("torch._utils", "_rebuild_qtensor") => Some("quantized tensors have no safetensors equivalent"),
        ("torch._utils", n) if n.starts_with("_rebuild_sparse") => {
            Some("sparse tensors have no safetensors equivalent")
        }
        ("torch", n) if n.starts_with('Q') && n.ends_with("Storage") => {
            Some("quantized storages have no safetensors equivalent")
        }
        ("torch", "per_tensor_affine" | "per_channel_affine") => {
            Some("quantized tensors have no safetensors equivalent")
        }
        ("__torch__", _) => Some("this looks like a TorchScript archive"),
        (m, _) if m.starts_with("__torch__.") => Some("this looks like a TorchScript archive"),
        ("__main__", _) => Some("a pickled Python object (such as a whole nn.Module) needs its code; save its state_dict() instead"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list() {
        assert_eq!(
            Global::resolve("torch._utils", "_rebuild_tensor_v2"),
            Ok(Global::RebuildTensorV2)
        );
        assert_eq!(
            Global::resolve("torch", "BFloat16Storage"),
            Ok(Global::TypedStorage(TorchDtype::BFloat16))
        );
        assert_eq!(
            Global::resolve("torch", "float8_e5m2"),
            Ok(Global::Dtype(TorchDtype::Float8E5M2))
        );
        assert_eq!(Global::resolve("posix", "system"), Err(None));
        assert_eq!(Global::resolve("__builtin__", "eval"), Err(None));
        assert_eq!(Global::resolve("torch", "load"), Err(None));
        // Spellings torch's weights_only allow-list does not have.
        assert_eq!(Global::resolve("torch", "half"), Err(None));
        assert_eq!(Global::resolve("torch", "UntypedStorage"), Err(None));
        assert_eq!(Global::resolve("torch._tensor", "Tensor"), Err(None));
        assert_eq!(Global::resolve("torch.nn", "Parameter"), Err(None));
        assert_eq!(
            Global::resolve("torch", "float16"),
            Ok(Global::Dtype(TorchDtype::Float16))
        );
        assert!(Global::resolve("torch._utils", "_rebuild_qtensor")
            .unwrap_err()
            .is_some());
        assert!(Global::resolve("__main__", "MyNet").unwrap_err().is_some());
    }
}
