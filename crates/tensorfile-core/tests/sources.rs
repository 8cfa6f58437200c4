//! Reading from a source that is not a local file: headers and slices read
//! only the bytes they need.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use tensorfile_core::file::HEADER_PROBE;
use tensorfile_core::{ByteSource, Dtype, SafeTensors, SliceArg, TensorSpec, WriteOptions};

/// A remote-like source: a header followed by `data_len` bytes whose value
/// at data offset `i` is `i % 251`, computed on demand (no 1 GiB buffer),
/// counting every byte and request asked of it.
struct Counting {
    header: Vec<u8>,
    data_len: u64,
    bytes: AtomicU64,
    requests: AtomicU64,
}

impl Counting {
    fn new(specs: &[TensorSpec]) -> Counting {
        let layout =
            tensorfile_core::writer::Layout::new(specs, None, &WriteOptions::default()).unwrap();
        Counting {
            header: layout.header().to_vec(),
            data_len: layout.data_len(),
            bytes: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    fn byte_at(&self, at: u64) -> u8 {
        match self.header.get(at as usize) {
            Some(&b) => b,
            None => ((at - self.header.len() as u64) % 251) as u8,
        }
    }
}

impl ByteSource for Counting {
    fn len(&self) -> u64 {
        self.header.len() as u64 + self.data_len
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if offset + buf.len() as u64 > self.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self.byte_at(offset + i as u64);
        }
        Ok(())
    }
}

#[test]
fn a_row_of_a_1_gib_tensor_reads_only_that_row_and_the_first_header_read() {
    let (rows, cols) = (16384u64, 16384u64); // F32: 1 GiB
    let specs = [
        TensorSpec::new("embed", Dtype::F32, [rows, cols]),
        TensorSpec::new("norm", Dtype::F32, [cols]),
    ];
    let source = Counting::new(&specs);
    let header_len = source.header.len() as u64;
    let file = SafeTensors::from_source(source, &Default::default()).unwrap();
    // One request for the header: it fits the first read.
    let after_header = file.source().bytes.load(Ordering::Relaxed);
    assert_eq!(file.source().requests.load(Ordering::Relaxed), 1);
    assert!(after_header <= HEADER_PROBE && after_header >= header_len);

    let row = 1234u64;
    let slice = file.slice("embed", &[SliceArg::Index(row as i64)]).unwrap();
    assert_eq!(slice.shape(), &[cols]);
    let bytes = file.read_slice(&slice).unwrap();
    let read = file.source().bytes.load(Ordering::Relaxed) - after_header;
    assert_eq!(read, cols * 4, "only the row's bytes");
    assert_eq!(file.source().requests.load(Ordering::Relaxed), 2);
    // And they are the right bytes.
    let info = file.info("embed").unwrap();
    let start = header_len + info.data_offsets.0 + row * cols * 4;
    for (i, &b) in bytes.iter().enumerate() {
        assert_eq!(b, file.source().byte_at(start + i as u64), "byte {i}");
    }

    // A column slice of a few rows: one range per row, each read once.
    let before = file.source().bytes.load(Ordering::Relaxed);
    let slice = file
        .slice(
            "embed",
            &[SliceArg::range(10, 13), SliceArg::range(100, 108)],
        )
        .unwrap();
    let bytes = file.read_slice(&slice).unwrap();
    assert_eq!(bytes.len(), 3 * 8 * 4);
    assert_eq!(
        file.source().bytes.load(Ordering::Relaxed) - before,
        3 * 8 * 4
    );
}

#[test]
fn a_header_longer_than_the_first_read_takes_a_second() {
    let specs: Vec<TensorSpec> = (0..5000)
        .map(|i| TensorSpec::new(format!("layer.{i}.weight"), Dtype::U8, [1]))
        .collect();
    let source = Counting::new(&specs);
    assert!(source.header.len() as u64 > HEADER_PROBE);
    let file = SafeTensors::from_source(source, &Default::default()).unwrap();
    assert_eq!(file.len(), 5000);
    assert_eq!(file.source().requests.load(Ordering::Relaxed), 2);
    assert_eq!(
        file.source().bytes.load(Ordering::Relaxed),
        file.header().data_start()
    );
}
