//! Writes a synthetic `torch.save`-style zip checkpoint, without Python:
//! for benchmarks and large-file tests.
//!
//! ```text
//! cargo run --release -p tensorfile-pytorch --example make_checkpoint -- OUT.pt [MIB]
//! ```
//!
//! The state dict holds F32 matrices of 4096 x 1024 (16 MiB) until the
//! total reaches MIB (default 1024): every 8th one is saved transposed
//! (column-major strides, so converting it needs re-ordering), every 16th
//! one also appears under a second name (tied weights), and every 4th one
//! has a bias that is a slice of a larger storage.
//!
//! The pickle is protocol 2 with the opcodes torch emits; the zip is
//! stored, with real CRCs. Only for trusted, generated data: no escaping
//! of names, no ZIP64 (the file must stay under 4 GiB).

use std::fs::File;
use std::io::{BufWriter, Write};

const ROWS: u64 = 4096;
const COLS: u64 = 1024;

struct Tensor {
    name: String,
    key: String,
    storage_numel: u64,
    offset: u64,
    shape: Vec<u64>,
    strides: Vec<u64>,
}

/// Pickle opcodes for the values we need.
struct Pickle(Vec<u8>);

impl Pickle {
    fn str(&mut self, s: &str) {
        self.0.push(b'X');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn int(&mut self, v: u64) {
        self.0.extend_from_slice(&[0x8a, 8]);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn global(&mut self, module: &str, name: &str) {
        self.0.push(b'c');
        self.0
            .extend_from_slice(format!("{module}\n{name}\n").as_bytes());
    }
    fn tuple(&mut self, items: &[u64]) {
        self.0.push(b'(');
        for &i in items {
            self.int(i);
        }
        self.0.push(b't');
    }
    fn tensor(&mut self, t: &Tensor) {
        self.global("torch._utils", "_rebuild_tensor_v2");
        self.0.push(b'(');
        self.0.push(b'(');
        self.str("storage");
        self.global("torch", "FloatStorage");
        self.str(&t.key);
        self.str("cpu");
        self.int(t.storage_numel);
        self.0.extend_from_slice(b"tQ");
        self.int(t.offset);
        self.tuple(&t.shape);
        self.tuple(&t.strides);
        self.0.push(0x89);
        self.global("collections", "OrderedDict");
        self.0.extend_from_slice(b")Rt");
        self.0.push(b'R');
    }
}

struct Zip {
    out: BufWriter<File>,
    pos: u64,
    central: Vec<u8>,
    count: u16,
}

impl Zip {
    fn entry(&mut self, name: &str, data: &[u8]) -> std::io::Result<()> {
        let mut crc = flate2::Crc::new();
        crc.update(data);
        let crc = crc.sum();
        let size = u32::try_from(data.len()).expect("entry under 4 GiB");
        let offset = u32::try_from(self.pos).expect("file under 4 GiB");
        let mut local = Vec::with_capacity(30 + name.len());
        local.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        local.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // version, flags, method, time, date
        local.extend_from_slice(&crc.to_le_bytes());
        local.extend_from_slice(&size.to_le_bytes());
        local.extend_from_slice(&size.to_le_bytes());
        local.extend_from_slice(&(name.len() as u16).to_le_bytes());
        local.extend_from_slice(&0u16.to_le_bytes());
        local.extend_from_slice(name.as_bytes());
        self.out.write_all(&local)?;
        self.out.write_all(data)?;
        self.pos += (local.len() + data.len()) as u64;

        let c = &mut self.central;
        c.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        c.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // made by, needed, flags, method, time, date
        c.extend_from_slice(&crc.to_le_bytes());
        c.extend_from_slice(&size.to_le_bytes());
        c.extend_from_slice(&size.to_le_bytes());
        c.extend_from_slice(&(name.len() as u16).to_le_bytes());
        c.extend_from_slice(&[0; 12]); // extra, comment, disk, internal, external attributes
        c.extend_from_slice(&offset.to_le_bytes());
        c.extend_from_slice(name.as_bytes());
        self.count += 1;
        Ok(())
    }

    fn finish(mut self) -> std::io::Result<()> {
        let cd_offset = u32::try_from(self.pos).expect("file under 4 GiB");
        self.out.write_all(&self.central)?;
        let mut eocd = Vec::with_capacity(22);
        eocd.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        eocd.extend_from_slice(&[0, 0, 0, 0]);
        eocd.extend_from_slice(&self.count.to_le_bytes());
        eocd.extend_from_slice(&self.count.to_le_bytes());
        eocd.extend_from_slice(&(self.central.len() as u32).to_le_bytes());
        eocd.extend_from_slice(&cd_offset.to_le_bytes());
        eocd.extend_from_slice(&0u16.to_le_bytes());
        self.out.write_all(&eocd)?;
        self.out.flush()
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: make_checkpoint OUT.pt [MIB]");
    let mib: u64 = args
        .next()
        .map_or(1024, |s| s.parse().expect("MIB is a number"));
    let matrix_bytes = ROWS * COLS * 4;
    let layers = (mib << 20).div_ceil(matrix_bytes);

    let mut tensors = Vec::new();
    let mut storages: Vec<(String, u64)> = Vec::new();
    for i in 0..layers {
        let key = storages.len().to_string();
        storages.push((key.clone(), ROWS * COLS));
        let (shape, strides) = if i % 8 == 7 {
            (vec![ROWS, COLS], vec![1, ROWS]) // a transpose of a COLS x ROWS buffer
        } else {
            (vec![ROWS, COLS], vec![COLS, 1])
        };
        let t = Tensor {
            name: format!("layers.{i}.weight"),
            key: key.clone(),
            storage_numel: ROWS * COLS,
            offset: 0,
            shape,
            strides,
        };
        if i % 16 == 15 {
            tensors.push(Tensor {
                name: format!("layers.{i}.tied"),
                key: t.key.clone(),
                storage_numel: t.storage_numel,
                offset: 0,
                shape: t.shape.clone(),
                strides: t.strides.clone(),
            });
        }
        tensors.push(t);
        if i % 4 == 0 {
            let key = storages.len().to_string();
            storages.push((key.clone(), 2 * COLS));
            tensors.push(Tensor {
                name: format!("layers.{i}.bias"),
                key,
                storage_numel: 2 * COLS,
                offset: COLS,
                shape: vec![COLS],
                strides: vec![1],
            });
        }
    }

    let mut p = Pickle(b"\x80\x02}(".to_vec());
    for t in &tensors {
        p.str(&t.name);
        p.tensor(t);
    }
    p.0.extend_from_slice(b"u.");

    let mut zip = Zip {
        out: BufWriter::with_capacity(1 << 20, File::create(&path)?),
        pos: 0,
        central: Vec::new(),
        count: 0,
    };
    zip.entry("archive/data.pkl", &p.0)?;
    zip.entry("archive/byteorder", b"little")?;
    for (key, numel) in &storages {
        // A cheap deterministic pattern, different per storage.
        let seed: u32 = key.parse::<u32>().unwrap_or(0);
        let data: Vec<u8> = (0..*numel as u32)
            .flat_map(|j| ((j.wrapping_mul(2654435761) ^ seed) as f32 / 4e9).to_le_bytes())
            .collect();
        zip.entry(&format!("archive/data/{key}"), &data)?;
    }
    zip.entry("archive/version", b"3\n")?;
    zip.finish()?;
    eprintln!(
        "{path}: {} tensors, {} storages",
        tensors.len(),
        storages.len()
    );
    Ok(())
}
