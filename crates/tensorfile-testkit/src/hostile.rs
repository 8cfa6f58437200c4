//! Builders of hostile `torch.save` checkpoints, made at test time: the
//! files of issue 12 (a pickle that clones itself, a deflated storage
//! inflated once per view, expansions with no total cap) and their
//! variants, in a few kilobytes each.
//!
//! Used by the tests of tensorfile-pytorch, the library, the CLI and the C
//! library, and by tensorfile-pytorch's `make_hostile` example (which
//! writes them for measuring by hand). Only for generated data: no escaping of names, no
//! ZIP64, CRCs left at 0 (the loader does not check them).

use flate2::{Compress, Compression, FlushCompress};

/// Pickle opcodes, written by hand.
pub struct Pickle {
    /// The pickle bytes written so far.
    pub out: Vec<u8>,
    memo: u32,
}

impl Default for Pickle {
    fn default() -> Pickle {
        Pickle::new()
    }
}

impl Pickle {
    /// Protocol 2, as `torch.save` writes.
    pub fn new() -> Pickle {
        Pickle {
            out: vec![0x80, 2],
            memo: 0,
        }
    }
    /// Appends raw opcode bytes.
    pub fn op(&mut self, bytes: &[u8]) -> &mut Pickle {
        self.out.extend_from_slice(bytes);
        self
    }
    /// Appends a string (BINUNICODE).
    pub fn str(&mut self, s: &str) -> &mut Pickle {
        self.out.push(b'X');
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        self
    }
    /// Appends an unsigned integer (LONG1, eight bytes).
    pub fn int(&mut self, v: u64) -> &mut Pickle {
        self.out.extend_from_slice(&[0x8a, 8]);
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a GLOBAL `module name`.
    pub fn global(&mut self, module: &str, name: &str) -> &mut Pickle {
        self.out.push(b'c');
        self.out
            .extend_from_slice(format!("{module}\n{name}\n").as_bytes());
        self
    }
    /// `LONG_BINPUT` of the top of the stack under the next id, returned.
    pub fn put(&mut self) -> u32 {
        let id = self.memo;
        self.memo += 1;
        self.out.push(b'r');
        self.out.extend_from_slice(&id.to_le_bytes());
        id
    }
    /// `LONG_BINGET`.
    pub fn get(&mut self, id: u32) -> &mut Pickle {
        self.out.push(b'j');
        self.out.extend_from_slice(&id.to_le_bytes());
        self
    }
    /// Appends a tuple of integers.
    pub fn ints(&mut self, items: &[u64]) -> &mut Pickle {
        self.out.push(b'(');
        for &i in items {
            self.int(i);
        }
        self.out.push(b't');
        self
    }
    /// `STOP`.
    pub fn finish(&mut self) -> Vec<u8> {
        self.out.push(b'.');
        std::mem::take(&mut self.out)
    }
}

/// One record of a zip archive.
pub struct Record {
    /// Its name in the archive.
    pub name: String,
    /// The bytes as stored in the archive.
    pub data: Vec<u8>,
    /// Deflated (with this inflated size), or stored.
    pub inflated: Option<u64>,
}

impl Record {
    /// A record stored as it is.
    pub fn stored(name: &str, data: Vec<u8>) -> Record {
        Record {
            name: name.to_string(),
            data,
            inflated: None,
        }
    }
    /// A record of `plain` deflated.
    pub fn deflated(name: &str, plain: &[u8]) -> Record {
        Record {
            name: name.to_string(),
            data: deflate(plain),
            inflated: Some(plain.len() as u64),
        }
    }
}

/// A zip archive of `records`, local headers first, then the central
/// directory (no ZIP64: everything stays under 4 GiB).
pub fn zip(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for r in records {
        let offset = out.len() as u32;
        let (method, size) = match r.inflated {
            Some(n) => (8u16, n as u32),
            None => (0u16, r.data.len() as u32),
        };
        let csize = r.data.len() as u32;
        let name = r.name.as_bytes();
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        out.extend_from_slice(&20u16.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&method.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // time, date
        out.extend_from_slice(&0u32.to_le_bytes()); // crc
        out.extend_from_slice(&csize.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&r.data);

        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes());
        central.extend_from_slice(&0u16.to_le_bytes());
        central.extend_from_slice(&method.to_le_bytes());
        central.extend_from_slice(&[0; 4]);
        central.extend_from_slice(&0u32.to_le_bytes());
        central.extend_from_slice(&csize.to_le_bytes());
        central.extend_from_slice(&size.to_le_bytes());
        central.extend_from_slice(&(name.len() as u16).to_le_bytes());
        central.extend_from_slice(&[0; 8]); // extra, comment, disk, internal
        central.extend_from_slice(&0u32.to_le_bytes()); // external
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name);
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let n = records.len() as u16;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// Raw deflate of `plain`.
pub fn deflate(plain: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), Compression::default());
    e.write_all(plain).expect("deflate");
    e.finish().expect("deflate")
}

/// `len` bytes of zeros, deflated without deflating them all: each MiB is
/// one sync-flushed run of blocks that refers only to itself, repeated,
/// then a final empty block. About 1 KiB per MiB.
pub fn deflated_zeros(len: u64) -> Vec<u8> {
    const MIB: u64 = 1 << 20;
    let flushed = |n: u64| {
        let plain = vec![0u8; n as usize];
        let mut c = Compress::new(Compression::best(), false);
        let mut out = Vec::with_capacity(n as usize / 100 + 1024);
        c.compress_vec(&plain, &mut out, FlushCompress::Sync)
            .expect("deflate");
        assert_eq!(c.total_in(), n, "the sync flush took everything");
        assert!(out.len() < out.capacity(), "the sync flush had room");
        out
    };
    let mib = flushed(MIB);
    let mut out = Vec::new();
    for _ in 0..len / MIB {
        out.extend_from_slice(&mib);
    }
    if !len.is_multiple_of(MIB) {
        out.extend_from_slice(&flushed(len % MIB));
    }
    // A final fixed-Huffman block with only the end-of-block code.
    out.extend_from_slice(&[0x03, 0x00]);
    out
}

/// A storage of a state dict: its key, torch storage class, element size
/// and element count.
pub struct Storage {
    /// Its key in the archive (`archive/data/KEY`).
    pub key: String,
    /// The torch storage class (`FloatStorage`, ...).
    pub class: &'static str,
    /// Bytes per element.
    pub elem: u64,
    /// How many elements.
    pub numel: u64,
}

impl Storage {
    /// A `FloatStorage` (F32) of `numel` elements under `key`.
    pub fn f32(key: &str, numel: u64) -> Storage {
        Storage {
            key: key.into(),
            class: "FloatStorage",
            elem: 4,
            numel,
        }
    }
}

/// One tensor of a state dict: a view of storage `storage`.
pub struct Tensor {
    /// Its name in the state dict.
    pub name: String,
    /// Which storage it views (an index into the storages).
    pub storage: usize,
    /// Its first element, in elements from the storage's start.
    pub offset: u64,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Its strides, in elements.
    pub strides: Vec<u64>,
}

impl Tensor {
    /// `name`, a view of storage `storage` from element `offset` with this
    /// shape and these strides (in elements).
    pub fn view(name: &str, storage: usize, offset: u64, shape: &[u64], strides: &[u64]) -> Tensor {
        Tensor {
            name: name.into(),
            storage,
            offset,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        }
    }
}

/// A global the first time (memoized), fetched from the memo after.
fn global_once(p: &mut Pickle, memo: &mut Option<u32>, module: &str, name: &str) {
    match *memo {
        Some(id) => {
            p.get(id);
        }
        None => {
            p.global(module, name);
            *memo = Some(p.put());
        }
    }
}

/// The pickle of `{name: tensor, ...}` as `torch.save` writes a state dict
/// (each global and persistent id once, then fetched from the memo; no
/// POP, which torch's restricted unpickler refuses).
pub fn state_dict_pickle(storages: &[Storage], tensors: &[Tensor]) -> Vec<u8> {
    let mut p = Pickle::new();
    p.op(b"}");
    p.put();
    let (mut rebuild, mut ordered) = (None, None);
    let mut pids: Vec<Option<u32>> = vec![None; storages.len()];
    p.op(b"(");
    for t in tensors {
        p.str(&t.name);
        global_once(&mut p, &mut rebuild, "torch._utils", "_rebuild_tensor_v2");
        p.op(b"(");
        match pids[t.storage] {
            Some(id) => {
                p.get(id);
            }
            None => {
                let s = &storages[t.storage];
                p.op(b"(");
                p.str("storage");
                p.global("torch", s.class);
                p.str(&s.key);
                p.str("cpu");
                p.int(s.numel);
                p.op(b"tQ");
                pids[t.storage] = Some(p.put());
            }
        }
        p.int(t.offset);
        p.ints(&t.shape);
        p.ints(&t.strides);
        p.op(&[0x89]); // requires_grad = False
        global_once(&mut p, &mut ordered, "collections", "OrderedDict");
        p.op(b")R"); // backward hooks: OrderedDict()
        p.op(b"tR");
    }
    p.op(b"u");
    p.finish()
}

/// A checkpoint zip (`archive/...`) with this pickle and these storage
/// records (`data/<key>`).
pub fn checkpoint(pickle: Record, storages: Vec<Record>) -> Vec<u8> {
    let mut records = vec![
        pickle,
        Record::stored("archive/byteorder", b"little".to_vec()),
    ];
    records.extend(storages);
    records.push(Record::stored("archive/version", b"3\n".to_vec()));
    zip(&records)
}

/// How the clone bomb applies `torch.Size` to its shared object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Apply {
    /// `REDUCE` with the shared tuple as the argument tuple.
    Reduce,
    /// `NEWOBJ`, likewise.
    NewObj,
    /// `NEWOBJ_EX` with an empty dict of keyword arguments.
    NewObjEx,
    /// `torch.Size()`, then `BUILD` with the shared object as its state.
    Build,
}

/// What the clone bomb shares: a tuple of Nones passed as the argument
/// tuple itself (the issue's file), or a tuple, list or dict of them passed
/// as the one argument (`torch.Size((None, ...))`, as torch pickles a Size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shared {
    /// A tuple of Nones as the argument tuple itself (the issue's file).
    Tuple,
    /// A tuple of Nones as the one argument.
    TupleArg,
    /// A list of Nones as the one argument.
    List,
    /// A dict of Nones as the one argument.
    Dict,
}

/// Issue 12 item 1: a pickle that memoizes one container of `n` Nones,
/// drops it with POP (refused since issue 27, as torch refuses it) and
/// applies `torch.Size` to it `calls` times; the results are the values of
/// a dict `{"v0": ..., "v1": ...}` (which loading renders as text). The
/// pickle is deflated: with n = 1,000,000 and 2000 calls the file is a few
/// kilobytes.
pub fn clone_bomb(apply: Apply, shared: Shared, n: usize, calls: usize) -> Vec<u8> {
    let mut p = Pickle::new();
    match shared {
        Shared::Tuple | Shared::TupleArg => {
            p.op(b"(");
            p.out.extend(std::iter::repeat_n(b'N', n));
            p.op(b"t");
        }
        Shared::List => {
            p.op(b"](");
            p.out.extend(std::iter::repeat_n(b'N', n));
            p.op(b"e");
        }
        Shared::Dict => {
            // {None: None} n times over: SETITEMS keeps every pair (Python
            // would keep one; the interpreter does not de-duplicate).
            p.op(b"}(");
            p.out.extend(std::iter::repeat_n(b'N', 2 * n));
            p.op(b"u");
        }
    }
    let big = p.put();
    p.op(b"0}");
    let kwargs = p.put();
    p.op(b"0");
    p.global("torch", "Size");
    let size = p.put();
    p.op(b"0}(");
    for i in 0..calls {
        p.str(&format!("v{i}"));
        p.get(size);
        let args = |p: &mut Pickle| {
            p.get(big);
            if shared != Shared::Tuple {
                p.op(&[0x85]); // TUPLE1
            }
        };
        match apply {
            Apply::Reduce => {
                args(&mut p);
                p.op(b"R");
            }
            Apply::NewObj => {
                args(&mut p);
                p.op(&[0x81]);
            }
            Apply::NewObjEx => {
                args(&mut p);
                p.get(kwargs).op(&[0x92]);
            }
            Apply::Build => {
                p.op(b")R");
                p.get(big).op(b"b");
            }
        }
    }
    p.op(b"u");
    let pickle = p.finish();
    checkpoint(Record::deflated("archive/data.pkl", &pickle), Vec::new())
}

/// A pickle whose one memo id is 19,999,999: a dense memo would need 20
/// million slots at once; the memo, a map, holds one entry.
pub fn sparse_memo() -> Vec<u8> {
    let mut p = Pickle::new();
    p.op(b"N").op(b"r").op(&19_999_999u32.to_le_bytes());
    let pickle = p.finish();
    checkpoint(Record::stored("archive/data.pkl", pickle), Vec::new())
}

/// Issue 12 item 2: one deflated F32 storage of `storage_bytes` zeros and
/// `views` one-element views into it, named `t0`, `t1`, ...: spread evenly
/// up to its last element with `spread`, else its first elements. With
/// 1 GiB and 128 views the file is about 1 MB.
pub fn deflated_views(views: u64, storage_bytes: u64, spread: bool) -> Vec<u8> {
    let numel = storage_bytes / 4;
    let storages = [Storage::f32("0", numel)];
    let tensors: Vec<Tensor> = (0..views)
        .map(|i| Tensor {
            name: format!("t{i}"),
            storage: 0,
            offset: if spread {
                // The last view reads the storage's last element.
                (numel - 1) - (views - 1 - i) * ((numel - 1) / views.max(1))
            } else {
                i
            },
            shape: vec![1],
            strides: vec![1],
        })
        .collect();
    let pickle = state_dict_pickle(&storages, &tensors);
    let record = Record {
        name: "archive/data/0".into(),
        data: deflated_zeros(numel * 4),
        inflated: Some(numel * 4),
    };
    checkpoint(Record::stored("archive/data.pkl", pickle), vec![record])
}

/// Issue 12 item 3: `count` stride-0 views `e0`, `e1`, ... of
/// `rows x 256` bytes each, all of one 256-byte storage (uint8, rows
/// repeated): a tiny file that materializes `count * rows * 256` bytes.
pub fn expansions(count: usize, rows: u64) -> Vec<u8> {
    let views: Vec<(Vec<u64>, Vec<u64>)> =
        (0..count).map(|_| (vec![rows, 256], vec![0, 1])).collect();
    expanded_views(&views)
}

/// Views `e0`, `e1`, ... with these shapes and strides, all of one
/// 256-byte storage holding the bytes 0..255.
pub fn expanded_views(views: &[(Vec<u64>, Vec<u64>)]) -> Vec<u8> {
    let storages = [Storage {
        key: "0".into(),
        class: "ByteStorage",
        elem: 1,
        numel: 256,
    }];
    let tensors: Vec<Tensor> = views
        .iter()
        .enumerate()
        .map(|(i, (shape, strides))| Tensor {
            name: format!("e{i}"),
            storage: 0,
            offset: 0,
            shape: shape.clone(),
            strides: strides.clone(),
        })
        .collect();
    let pickle = state_dict_pickle(&storages, &tensors);
    let data: Vec<u8> = (0..=255u8).collect();
    checkpoint(
        Record::stored("archive/data.pkl", pickle),
        vec![Record::stored("archive/data/0", data)],
    )
}

/// Expanded views totalling the default cap (1 GiB) plus `extra` bytes:
/// one of 1 GiB - 256 B, one of 256 + `extra` B (stride 0).
pub fn expansions_at_default_cap(extra: u64) -> Vec<u8> {
    expanded_views(&[
        (vec![(1 << 22) - 1, 256], vec![0, 1]),
        (vec![256 + extra], vec![0]),
    ])
}
