//! Torch element types: their names in pickles (dtype objects and the
//! legacy typed storage classes) and how they map to safetensors dtypes.

use tensorfile_core::Dtype;

/// A torch dtype that a checkpoint can name.
///
/// Includes the ones safetensors cannot hold, so that they are refused with
/// a reason rather than as unknown globals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // Variant names are torch's own dtype names.
pub enum TorchDtype {
    Bool,
    UInt8,
    Int8,
    Int16,
    UInt16,
    Int32,
    UInt32,
    Int64,
    UInt64,
    Float16,
    BFloat16,
    Float32,
    Float64,
    Complex32,
    Complex64,
    Complex128,
    Float8E4M3fn,
    Float8E5M2,
    Float8E4M3fnuz,
    Float8E5M2fnuz,
    Float8E8M0fnu,
    Float4E2M1fnX2,
}

impl TorchDtype {
    /// The dtype object named `torch.<name>` (aliases such as `float` and
    /// `long` included).
    pub fn from_torch_name(name: &str) -> Option<TorchDtype> {
        use TorchDtype::*;
        Some(match name {
            "bool" => Bool,
            "uint8" => UInt8,
            "int8" => Int8,
            "int16" | "short" => Int16,
            "uint16" => UInt16,
            "int32" | "int" => Int32,
            "uint32" => UInt32,
            "int64" | "long" => Int64,
            "uint64" => UInt64,
            "float16" | "half" => Float16,
            "bfloat16" => BFloat16,
            "float32" | "float" => Float32,
            "float64" | "double" => Float64,
            "complex32" | "chalf" => Complex32,
            "complex64" | "cfloat" => Complex64,
            "complex128" | "cdouble" => Complex128,
            "float8_e4m3fn" => Float8E4M3fn,
            "float8_e5m2" => Float8E5M2,
            "float8_e4m3fnuz" => Float8E4M3fnuz,
            "float8_e5m2fnuz" => Float8E5M2fnuz,
            "float8_e8m0fnu" => Float8E8M0fnu,
            "float4_e2m1fn_x2" => Float4E2M1fnX2,
            _ => return None,
        })
    }

    /// The dtype of a legacy typed storage class such as `FloatStorage`.
    pub fn from_storage_class(name: &str) -> Option<TorchDtype> {
        use TorchDtype::*;
        Some(match name {
            "BoolStorage" => Bool,
            "ByteStorage" => UInt8,
            "CharStorage" => Int8,
            "ShortStorage" => Int16,
            "IntStorage" => Int32,
            "LongStorage" => Int64,
            "HalfStorage" => Float16,
            "BFloat16Storage" => BFloat16,
            "FloatStorage" => Float32,
            "DoubleStorage" => Float64,
            "ComplexFloatStorage" => Complex64,
            "ComplexDoubleStorage" => Complex128,
            _ => return None,
        })
    }

    /// Torch's name for it (`float32`).
    pub fn torch_name(self) -> &'static str {
        use TorchDtype::*;
        match self {
            Bool => "bool",
            UInt8 => "uint8",
            Int8 => "int8",
            Int16 => "int16",
            UInt16 => "uint16",
            Int32 => "int32",
            UInt32 => "uint32",
            Int64 => "int64",
            UInt64 => "uint64",
            Float16 => "float16",
            BFloat16 => "bfloat16",
            Float32 => "float32",
            Float64 => "float64",
            Complex32 => "complex32",
            Complex64 => "complex64",
            Complex128 => "complex128",
            Float8E4M3fn => "float8_e4m3fn",
            Float8E5M2 => "float8_e5m2",
            Float8E4M3fnuz => "float8_e4m3fnuz",
            Float8E5M2fnuz => "float8_e5m2fnuz",
            Float8E8M0fnu => "float8_e8m0fnu",
            Float4E2M1fnX2 => "float4_e2m1fn_x2",
        }
    }

    /// Bytes per element in torch's storage.
    pub fn element_size(self) -> u64 {
        use TorchDtype::*;
        match self {
            Bool | UInt8 | Int8 | Float8E4M3fn | Float8E5M2 | Float8E4M3fnuz | Float8E5M2fnuz
            | Float8E8M0fnu | Float4E2M1fnX2 => 1,
            Int16 | UInt16 | Float16 | BFloat16 => 2,
            Int32 | UInt32 | Float32 | Complex32 => 4,
            Int64 | UInt64 | Float64 | Complex64 => 8,
            Complex128 => 16,
        }
    }

    /// Size of the unit a byte swap reverses: the element size, except for
    /// complex numbers, whose real and imaginary parts are swapped separately.
    pub fn swap_unit(self) -> u64 {
        match self {
            TorchDtype::Complex32 | TorchDtype::Complex64 | TorchDtype::Complex128 => {
                self.element_size() / 2
            }
            _ => self.element_size(),
        }
    }

    /// The safetensors dtype with the same bytes, or why there is none
    /// (the core's dtype table says which dtype torch names how).
    pub fn to_safetensors(self) -> Result<Dtype, &'static str> {
        use TorchDtype::*;
        match self {
            Complex32 => Err("complex32 has no safetensors dtype"),
            Complex128 => Err("complex128 has no safetensors dtype"),
            Float4E2M1fnX2 => Err("float4_e2m1fn_x2 packs two values per byte; safetensors F4 would need a different shape"),
            _ => Dtype::from_torch_name(self.torch_name())
                .ok_or("torch's dtype has no safetensors dtype"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_agree_with_safetensors() {
        for name in [
            "bool",
            "uint8",
            "int8",
            "int16",
            "uint16",
            "int32",
            "uint32",
            "int64",
            "uint64",
            "float16",
            "bfloat16",
            "float32",
            "float64",
            "complex64",
            "float8_e4m3fn",
            "float8_e5m2",
            "float8_e4m3fnuz",
            "float8_e5m2fnuz",
            "float8_e8m0fnu",
        ] {
            let t = TorchDtype::from_torch_name(name).unwrap();
            assert_eq!(t.torch_name(), name);
            let d = t.to_safetensors().unwrap();
            assert_eq!(d.size(), Some(t.element_size() as usize), "{name}");
        }
        for name in ["complex128", "complex32", "float4_e2m1fn_x2"] {
            assert!(TorchDtype::from_torch_name(name)
                .unwrap()
                .to_safetensors()
                .is_err());
        }
        assert_eq!(
            TorchDtype::from_storage_class("FloatStorage"),
            Some(TorchDtype::Float32)
        );
        assert_eq!(TorchDtype::from_storage_class("DoubStorage"), None);
    }
}
