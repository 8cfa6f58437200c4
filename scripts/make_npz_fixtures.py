#!/usr/bin/env python3
"""Generate tests/fixtures/npz/ with numpy itself (run by hand, not in CI).

Environment: /work/venvs/gguf (numpy + ml_dtypes, pinned in
scripts/requirements-gguf.txt). Usage: python scripts/make_npz_fixtures.py

Writes .npy files (format versions 1.0, 2.0, 3.0; C and Fortran order; every
numpy dtype that has a safetensors dtype; ml_dtypes types as numpy saves them;
0-d, empty, big-endian; must-refuse cases) and .npz archives (np.savez,
np.savez_compressed), and tests/fixtures/npz/manifest.json describing them:
the header as written, the dtype descr, shape, fortran_order, version, the
data offset, the sha256 of the array's C-order little-endian bytes, what
np.load returns, and for .npz the zip structure of every member.
"""
from __future__ import annotations

import ast
import hashlib
import io
import json
import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np
import ml_dtypes

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "npz"

# numpy dtype -> safetensors dtype
ST = {"|b1": "BOOL", "|u1": "U8", "<u2": "U16", "<u4": "U32", "<u8": "U64",
      "|i1": "I8", "<i2": "I16", "<i4": "I32", "<i8": "I64",
      "<f2": "F16", "<f4": "F32", "<f8": "F64", "<c8": "C64"}


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def le_c_bytes(a: np.ndarray) -> bytes:
    """The array's elements in C order, little-endian."""
    a = np.asarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return np.ascontiguousarray(a).tobytes()


def jvalue(x):
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (np.integer, int)):
        return int(x)
    if isinstance(x, (np.complexfloating, complex)):
        return [jvalue(np.float64(x.real)), jvalue(np.float64(x.imag))]
    if isinstance(x, (np.floating, float)):
        f = float(x)
        if f != f:
            return "nan"
        if f in (float("inf"), float("-inf")):
            return "inf" if f > 0 else "-inf"
        return f
    return repr(x)


def parse_npy(b: bytes) -> dict:
    """Read the .npy header by hand (as a Rust reader would)."""
    assert b[:6] == b"\x93NUMPY", b[:6]
    major, minor = b[6], b[7]
    if major == 1:
        (hlen,) = struct.unpack("<H", b[8:10]); start = 10
    else:
        (hlen,) = struct.unpack("<I", b[8:12]); start = 12
    header = b[start:start + hlen]
    enc = "utf8" if major == 3 else "latin1"
    d = ast.literal_eval(header.decode(enc))
    return {"version": [major, minor], "header_len": hlen, "data_offset": start + hlen,
            "header": header.decode(enc), "descr": d["descr"] if isinstance(d["descr"], str) else
            [list(x) for x in d["descr"]], "shape": list(d["shape"]),
            "fortran_order": d["fortran_order"], "header_keys": sorted(d)}


def np_load_result(data: bytes, allow_pickle=False) -> dict:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = np.load(io.BytesIO(data), allow_pickle=allow_pickle)
    except Exception as e:  # noqa
        return {"error": f"{type(e).__name__}: {e}"}
    r = {"dtype": a.dtype.str, "dtype_repr": repr(a.dtype), "shape": list(a.shape),
         "f_contiguous_not_c": bool(a.flags.f_contiguous and not a.flags.c_contiguous)}
    if a.dtype.kind not in "OV" and a.dtype.names is None and a.dtype.kind in "biufc":
        r["sha256_le_c"] = sha256(le_c_bytes(a))
    return r


def describe_npy(b: bytes, arr=None) -> dict:
    h = parse_npy(b)
    d = dict(h)
    if len(d["header"]) > 1000:   # the 3000-field structured header: keep the manifest small
        d["header_sha256"] = sha256(d["header"].encode("utf8"))
        d["header"] = d["header"][:200] + "..."
        d["descr"] = f"<{len(d['descr'])} fields>"
    d["size"] = len(b)
    d["sha256"] = sha256(b)
    d["np_load"] = np_load_result(b)
    if arr is not None:
        a = np.asarray(arr)
        if a.dtype.kind != "O" and a.dtype.names is None:
            d["data_sha256_le_c"] = sha256(le_c_bytes(a))
            d["nbytes"] = int(a.nbytes)
            if a.size <= 64 and a.dtype.kind in "biufc":
                d["values"] = [jvalue(x) for x in np.ascontiguousarray(a).ravel().tolist()] \
                    if a.dtype.kind != "c" else [jvalue(x) for x in a.ravel()]
        # raw data bytes as stored (file order: Fortran files store F order)
        d["stored_data_sha256"] = sha256(b[h["data_offset"]:]) if a.dtype.kind != "O" else None
    descr = d["descr"] if isinstance(d["descr"], str) else None
    d["safetensors_dtype"] = ST.get(descr.replace(">", "<") if descr else None) if descr else None
    return d


def save_npy(path: Path, arr, version=None, allow_pickle=False):
    buf = io.BytesIO()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        np.lib.format.write_array(buf, arr, version=version, allow_pickle=allow_pickle)
    path.write_bytes(buf.getvalue())
    return buf.getvalue(), [str(x.message) for x in w]


def zip_structure(b: bytes) -> list[dict]:
    """Walk the local headers and the central directory by hand."""
    out = []
    zf = zipfile.ZipFile(io.BytesIO(b))
    for info in zf.infolist():
        off = info.header_offset
        sig, ver, flags, method, mtime, mdate, crc, csize, usize, nlen, xlen = \
            struct.unpack("<IHHHHHIIIHH", b[off:off + 30])
        assert sig == 0x04034B50
        name = b[off + 30:off + 30 + nlen]
        extra = b[off + 30 + nlen:off + 30 + nlen + xlen]
        ex, i = [], 0
        while i + 4 <= len(extra):
            hid, hlen = struct.unpack("<HH", extra[i:i + 4])
            body = extra[i + 4:i + 4 + hlen]
            e = {"id": f"0x{hid:04x}", "len": hlen}
            if hid == 0x0001:
                e["values_u64"] = list(struct.unpack("<" + "Q" * (hlen // 8), body))
            ex.append(e)
            i += 4 + hlen
        cex, i = [], 0
        while i + 4 <= len(info.extra):
            hid, hlen = struct.unpack("<HH", info.extra[i:i + 4])
            cex.append({"id": f"0x{hid:04x}", "len": hlen})
            i += 4 + hlen
        data_start = off + 30 + nlen + xlen
        out.append({
            "name": info.filename, "local_header_offset": off, "data_offset": data_start,
            "version_needed": ver, "flags": flags,
            "flag_data_descriptor": bool(flags & 0x08), "flag_utf8_name": bool(flags & 0x800),
            "method": method, "method_name": {0: "stored", 8: "deflate"}.get(method, "?"),
            "local_crc32": f"0x{crc:08x}", "local_compressed_size": csize, "local_uncompressed_size": usize,
            "local_extra": ex, "central_extra": cex,
            "central_compressed_size": info.compress_size, "central_uncompressed_size": info.file_size,
            "crc32": f"0x{info.CRC:08x}",
        })
    return out


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    man = {"generator": "scripts/make_npz_fixtures.py",
           "versions": {"numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__},
           "npy": {}, "npz": {}}

    def npy(name, arr, expect, version=None, allow_pickle=False, note=None):
        b, warns = save_npy(OUT / f"{name}.npy", arr, version=version, allow_pickle=allow_pickle)
        d = {"file": f"{name}.npy", "expect": expect}
        if note:
            d["note"] = note
        d["written_with"] = f"np.lib.format.write_array(f, arr, version={version!r}, allow_pickle={allow_pickle})"
        d["numpy_warnings"] = warns
        d.update(describe_npy(b, arr))
        man["npy"][name] = d

    base = np.arange(12, dtype=np.float32).reshape(3, 4) / 4 - 1
    npy("v1_f32_c", base, "ok", note="default write: version 1.0")
    npy("v1_f32_fortran", np.asfortranarray(base), "ok",
        note="Fortran order: the stored bytes are the column-major order; the logical array equals v1_f32_c")
    f3 = np.asfortranarray(rng.integers(-100, 100, size=(2, 3, 4)).astype(np.int16))
    npy("v1_i16_fortran_3d", f3, "ok")
    npy("v2_f32", base, "ok", version=(2, 0), note="explicit version=(2,0): 4-byte header length")
    npy("v3_f32", base, "ok", version=(3, 0),
        note="explicit version=(3,0) on a plain dtype: 4-byte header length, header utf8 (here pure ASCII)")

    # every numpy dtype that has a safetensors dtype
    dts = {"bool": np.array([True, False, True, True, False, False]),
           "u8": np.array([0, 1, 127, 128, 255], np.uint8),
           "u16": np.array([0, 1, 65535, 4660], np.uint16),
           "u32": np.array([0, 1, 2**32 - 1, 305419896], np.uint32),
           "u64": np.array([0, 1, 2**64 - 1, 2**63], np.uint64),
           "i8": np.array([-128, -1, 0, 1, 127], np.int8),
           "i16": np.array([-32768, -1, 0, 32767], np.int16),
           "i32": np.array([-2**31, -1, 0, 2**31 - 1], np.int32),
           "i64": np.array([-2**63, -1, 0, 2**63 - 1], np.int64),
           "f16": np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 6e-8, np.inf, np.nan], np.float16),
           "f32": np.array([0.0, -0.0, 1.0, -2.5, 3.4028235e38, 1e-45, np.inf, -np.inf, np.nan], np.float32),
           "f64": np.array([0.0, -0.0, 1.0, -2.5, 1.7976931348623157e308, 5e-324, np.inf, np.nan], np.float64),
           "c64": np.array([1 + 2j, -0.5 - 0.25j, 0j, complex(np.inf, np.nan)], np.complex64)}
    for k, a in dts.items():
        npy(f"dtype_{k}", a.reshape(2, -1) if a.size % 2 == 0 else a, "ok")

    # ml_dtypes types saved by numpy: the header loses the type
    mvals = np.array([0.0, 1.0, -2.0, 0.5, 448.0 / 4, -0.125], np.float32)
    for k in ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn"]:
        dt = np.dtype(getattr(ml_dtypes, k))
        v = np.abs(mvals) if k == "float8_e8m0fnu" else mvals
        if k == "float8_e8m0fnu":
            v = np.where(v == 0, 1.0, v)
        a = v.astype(dt)
        npy(f"mldtypes_{k}", a, "ambiguous",
            note=f"ml_dtypes.{k} saved by np.save: the descr is the dtype's .str ({dt.str!r}); the file does not say "
                 "which float type it was, np.load gives raw void (or fails); a reader can only take it as raw bytes "
                 "or refuse, unless told the type")

    # 0-d and empty
    npy("scalar_f32", np.array(3.5, np.float32), "ok", note="0-d: shape ()")
    npy("scalar_i64", np.array(-7, np.int64), "ok")
    npy("empty_f32_0x3", np.zeros((0, 3), np.float32), "ok")
    npy("empty_u8_0", np.zeros((0,), np.uint8), "ok")
    npy("empty_f16_fortran_2x0", np.asfortranarray(np.zeros((2, 0), np.float16)), "ok",
        note="empty written from a Fortran array: numpy writes fortran_order False for it (it is also C-contiguous)")
    # big-endian
    npy("be_f4", base.astype(">f4"), "ok", note="big-endian: values equal v1_f32_c")
    npy("be_i8", np.array([[1, -2], [2**40, -2**62]], ">i8"), "ok")
    npy("be_f2", np.array([1.0, -0.5, 65504.0, np.inf], ">f2"), "ok")
    npy("be_u2", np.array([1, 258, 65535], ">u2"), "ok")
    npy("be_c8", np.array([1 + 2j, -3j], ">c8"), "ok")
    npy("be_f8_fortran", np.asfortranarray(np.arange(6, dtype=">f8").reshape(2, 3)), "ok")

    # must refuse
    obj = np.array([1, "a", None, {"k": 2}], dtype=object)
    npy("refuse_object_pickle", obj, "refuse", allow_pickle=True,
        note="object dtype: the data is a pickle (descr '|O'); np.load refuses it unless allow_pickle=True")
    st = np.zeros(3, dtype=[("a", "<f4"), ("b", "<i2")])
    st["a"] = [1, 2, 3]; st["b"] = [-1, -2, -3]
    npy("refuse_structured", st, "refuse", note="structured dtype: descr is a list of fields")
    st3 = np.zeros(2, dtype=[("ä", "<f4"), ("βeta", "<i4")])
    npy("refuse_structured_utf8_v3", st3, "refuse",
        note="structured dtype with non-latin1 field names: numpy (version=None) falls back to format 3.0 "
             "because the header cannot be latin1-encoded; this is the only case where numpy picks 3.0 by itself")
    wide = np.zeros(1, dtype=[(f"field_{i:05d}", "<f4") for i in range(3000)])
    npy("refuse_structured_v2_auto", wide, "refuse",
        note="structured dtype whose header exceeds 65535 bytes: numpy (version=None) picks format 2.0 by itself; "
             "a plain dtype's header never gets that long")
    npy("refuse_c128", np.array([1 + 1j], np.complex128), "refuse", note="complex128: no safetensors dtype")
    npy("refuse_unicode", np.array(["ab", "ü"]), "refuse", note="'<U2': no safetensors dtype")
    npy("refuse_bytes", np.array([b"ab", b"c"]), "refuse", note="'|S2': no safetensors dtype")
    npy("refuse_datetime", np.array(["2024-01-01"], "M8[s]"), "refuse", note="datetime64: no safetensors dtype")

    # ---- npz
    def npz(name, fn, arrays_pos, arrays_kw, expect="ok", note=None):
        buf = io.BytesIO()
        fn(buf, *arrays_pos, **arrays_kw)
        b = buf.getvalue()
        (OUT / f"{name}.npz").write_bytes(b)
        members = {}
        zf = zipfile.ZipFile(io.BytesIO(b))
        all_arrays = {f"arr_{i}": a for i, a in enumerate(arrays_pos)}
        all_arrays.update(arrays_kw)
        for info in zf.infolist():
            data = zf.read(info)
            key = info.filename[:-4]
            members[info.filename] = describe_npy(data, all_arrays.get(key))
            members[info.filename]["key"] = key
        try:
            with np.load(io.BytesIO(b)) as z:
                load = {"files": list(z.files)}
        except Exception as e:  # noqa
            load = {"error": repr(e)}
        d = {"file": f"{name}.npz", "expect": expect, "size": len(b), "sha256": sha256(b),
             "written_with": f"np.{fn.__name__}", "np_load_files": load,
             "zip": zip_structure(b), "members": members}
        if note:
            d["note"] = note
        man["npz"][name] = d

    w = rng.standard_normal((4, 8)).astype(np.float32)
    bvec = rng.standard_normal(8).astype(np.float16)
    ids = np.arange(10, dtype=np.int64)
    npz("savez_positional", np.savez, [w, bvec, ids], {}, note="positional arrays become arr_0, arr_1, ...")
    npz("savez_keywords", np.savez, [], {"weight": w, "bias": bvec, "ids": ids})
    tricky = {"model.layers.0.self_attn.q_proj.weight": w, "a/b/c": bvec, "dir/": ids,
              "ü名": np.array([1, 2], np.uint8), "x.npy": np.array(1.0, np.float32)}
    npz("savez_tricky_names", np.savez, [], tricky,
        note="names with dots, slashes (zip 'directories'), a trailing slash, non-ASCII (zip utf8 flag) "
             "and one already ending in .npy (member 'x.npy.npy'); np.load keys are member names minus '.npy'")
    npz("savez_mixed", np.savez, [w], {"named": ids})
    npz("savez_compressed", np.savez_compressed, [], {"weight": w, "bias": bvec, "ids": ids,
                                                      "zeros": np.zeros((64, 64), np.float32)})
    npz("savez_empty", np.savez, [], {}, note="no arrays: a zip with no members")
    npz("savez_layouts", np.savez, [], {"fortran": np.asfortranarray(w), "big_endian": w.astype(">f4"),
                                        "scalar": np.array(2.0, np.float64), "empty": np.zeros((0, 4), np.int32),
                                        "bf16": w.astype(ml_dtypes.bfloat16)})
    npz("refuse_savez_object", np.savez, [], {"ok": ids, "obj": np.array([None, 1], dtype=object)},
        expect="refuse member 'obj.npy'",
        note="np.savez allows pickle by default: an object member is written as a pickle")

    (OUT / "manifest.json").write_text(json.dumps(man, indent=1, ensure_ascii=False) + "\n")
    print("wrote", len(man["npy"]), "npy and", len(man["npz"]), "npz")


if __name__ == "__main__":
    main()
