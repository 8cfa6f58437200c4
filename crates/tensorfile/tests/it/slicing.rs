//! Slicing, checked against a direct element-by-element model of NumPy
//! semantics on the same tensors.

use tensorfile::{SafeTensors, SliceArg};
use tensorfile_core::Error;

fn file_of(dtype: &str, shape: &[u64], data: &[u8]) -> SafeTensors {
    let shape_json = format!("{shape:?}").replace(' ', "");
    let header = format!(
        r#"{{"t":{{"dtype":"{dtype}","shape":{shape_json},"data_offsets":[0,{}]}}}}"#,
        data.len()
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    SafeTensors::from_source(
        tensorfile_core::file::Backing::Owned(bytes),
        &Default::default(),
    )
    .unwrap()
}

/// The positions one argument keeps in a dimension of length `dim`, or
/// `None` when the request is out of range.
fn positions(arg: SliceArg, dim: u64) -> Option<(Vec<u64>, bool)> {
    let resolve = |i: i64| -> Option<u64> {
        let p = if i < 0 { dim as i64 + i } else { i };
        (0..=dim as i64).contains(&p).then_some(p as u64)
    };
    match arg {
        SliceArg::Index(i) => {
            let p = resolve(i)?;
            (p < dim).then(|| (vec![p], false))
        }
        SliceArg::Range { start, stop, step } => {
            let s = start.map_or(Some(0), resolve)?;
            let e = stop.map_or(Some(dim), resolve)?;
            Some(((s..e).step_by(step as usize).collect(), true))
        }
    }
}

/// Expected (shape, elements) of slicing a C-order tensor of `shape`
/// holding 0, 1, 2, ... element by element.
fn model(shape: &[u64], args: &[SliceArg]) -> Option<(Vec<u64>, Vec<u64>)> {
    let mut kept = Vec::new();
    let mut out_shape = Vec::new();
    for (d, &dim) in shape.iter().enumerate() {
        let (p, keep_dim) = positions(args.get(d).copied().unwrap_or(SliceArg::full()), dim)?;
        if keep_dim {
            out_shape.push(p.len() as u64);
        }
        kept.push(p);
    }
    let mut values = Vec::new();
    let mut idx = vec![0usize; shape.len()];
    if kept.iter().all(|k| !k.is_empty()) {
        loop {
            let mut flat = 0u64;
            for d in 0..shape.len() {
                flat = flat * shape[d] + kept[d][idx[d]];
            }
            values.push(flat);
            let mut d = shape.len();
            loop {
                if d == 0 {
                    return Some((out_shape, values));
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < kept[d].len() {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
    Some((out_shape, values))
}

#[test]
fn slices_match_the_element_model() {
    let shape = [3u64, 4, 5];
    let n: u64 = shape.iter().product();
    let data: Vec<u8> = (0..n as u16).flat_map(|x| x.to_le_bytes()).collect();
    let f = file_of("U16", &shape, &data);
    let t = f.tensor("t").unwrap();
    let r =
        |start: Option<i64>, stop: Option<i64>, step: u64| SliceArg::Range { start, stop, step };
    let cases: Vec<Vec<SliceArg>> = vec![
        vec![],
        vec![SliceArg::Index(1)],
        vec![SliceArg::Index(-1), SliceArg::Index(2)],
        vec![SliceArg::full(), SliceArg::Index(0)],
        vec![SliceArg::range(1, 3)],
        vec![SliceArg::full(), SliceArg::range(1, 3)],
        vec![SliceArg::full(), SliceArg::full(), r(Some(1), None, 2)],
        vec![
            r(None, None, 2),
            SliceArg::range(-3, -1),
            r(Some(-4), Some(5), 3),
        ],
        vec![SliceArg::range(2, 1)],
        vec![SliceArg::full(), SliceArg::range(4, 4)],
        vec![SliceArg::Index(0), SliceArg::Index(0), SliceArg::Index(0)],
        vec![r(Some(0), Some(3), 5)],
        vec![SliceArg::Index(3)],
        vec![SliceArg::Index(-4)],
        vec![SliceArg::range(0, 4)],
        vec![SliceArg::range(-4, 2)],
        vec![r(None, None, 0)],
        vec![
            SliceArg::full(),
            SliceArg::full(),
            SliceArg::full(),
            SliceArg::full(),
        ],
    ];
    for args in cases {
        let got = t.slice(&args);
        let step_zero = args
            .iter()
            .any(|a| matches!(a, SliceArg::Range { step: 0, .. }));
        match (
            got,
            if step_zero || args.len() > 3 {
                None
            } else {
                model(&shape, &args)
            },
        ) {
            (Ok(s), Some((eshape, evalues))) => {
                assert_eq!(s.shape(), eshape.as_slice(), "{args:?}");
                let bytes = s.to_vec();
                let values: Vec<u64> = bytes
                    .chunks(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]) as u64)
                    .collect();
                assert_eq!(values, evalues, "{args:?}");
                assert_eq!(s.nbytes() as usize, bytes.len());
                let total: u64 = s.byte_ranges().map(|r| r.end - r.start).sum();
                assert_eq!(total as usize, bytes.len());
            }
            (Err(Error::Slice { .. }), None) => {}
            (got, expected) => panic!("{args:?}: got {got:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn contiguous_slices_are_one_range() {
    let data = vec![0u8; 3 * 4 * 4];
    let f = file_of("F32", &[3, 4], &data);
    let t = f.tensor("t").unwrap();
    let rows = t.slice(&[SliceArg::range(1, 3)]).unwrap();
    assert_eq!(rows.byte_ranges().collect::<Vec<_>>(), vec![(16..48)]);
    assert_eq!(rows.data_ranges().collect::<Vec<_>>(), vec![(16..48)]);
    let cols = t.slice(&[SliceArg::full(), SliceArg::range(1, 3)]).unwrap();
    assert_eq!(
        cols.byte_ranges().collect::<Vec<_>>(),
        [4..12, 20..28, 36..44]
    );
}

#[test]
fn sub_byte_slices_must_fall_on_byte_boundaries() {
    let f = file_of("F4", &[2, 4], &[0x21, 0x43, 0x65, 0x87]);
    let t = f.tensor("t").unwrap();
    let row = t.slice(&[SliceArg::Index(1)]).unwrap();
    assert_eq!(row.to_vec(), [0x65, 0x87]);
    let pair = t.slice(&[SliceArg::full(), SliceArg::range(2, 4)]).unwrap();
    assert_eq!(pair.to_vec(), [0x43, 0x87]);
    assert!(matches!(
        t.slice(&[SliceArg::full(), SliceArg::range(1, 3)]),
        Err(Error::Slice { .. })
    ));
    assert!(matches!(
        t.slice(&[SliceArg::Index(0), SliceArg::Index(1)]),
        Err(Error::Slice { .. })
    ));
    let f6 = file_of("F6_E2M3", &[2, 4], &[0; 6]);
    let t = f6.tensor("t").unwrap();
    assert_eq!(
        t.slice(&[SliceArg::Index(1)])
            .unwrap()
            .byte_ranges()
            .collect::<Vec<_>>(),
        vec![(3..6)]
    );
    assert!(t.slice(&[SliceArg::full(), SliceArg::range(0, 2)]).is_err());
}

#[test]
fn empty_and_scalar_tensors_slice_without_panics() {
    let f = file_of("U8", &[0, 3], &[]);
    let t = f.tensor("t").unwrap();
    let s = t.slice(&[SliceArg::full(), SliceArg::Index(1)]).unwrap();
    assert_eq!(s.shape(), &[0]);
    assert!(s.to_vec().is_empty());
    assert!(t.slice(&[SliceArg::Index(0)]).is_err());
    let f = file_of("U8", &[], &[9]);
    let t = f.tensor("t").unwrap();
    assert_eq!(t.slice(&[]).unwrap().to_vec(), [9]);
    assert!(t.slice(&[SliceArg::Index(0)]).is_err());
}

/// A zero dimension beside huge ones is a valid empty tensor: slicing it
/// gives the empty result without multiplying the huge dimensions (which
/// overflowed 64 bits: a panic in debug builds, a wrap in release).
#[test]
fn empty_tensors_with_huge_dimensions_slice_without_overflow() {
    let huge = 1u64 << 40;
    // (The header parser refuses `[huge, huge, 0]`: its running product
    // overflows before it reaches the zero.)
    for shape in [[0, huge, huge], [huge, 0, huge]] {
        let f = file_of("F32", &shape, &[]);
        let t = f.tensor("t").unwrap();
        for args in [
            vec![],
            vec![SliceArg::full(), SliceArg::full(), SliceArg::range(1, 3)],
            vec![
                SliceArg::full(),
                SliceArg::full(),
                SliceArg::Range {
                    start: Some(-5),
                    stop: None,
                    step: 3,
                },
            ],
        ] {
            let s = t
                .slice(&args)
                .unwrap_or_else(|e| panic!("{shape:?} {args:?}: {e}"));
            assert_eq!(s.numel(), 0, "{shape:?} {args:?}");
            assert_eq!(s.nbytes(), 0);
            assert_eq!(s.byte_ranges().count(), 0);
            assert!(s.to_vec().is_empty());
        }
        // The kept shape is NumPy's, huge dimensions and all.
        let s = t.slice(&[SliceArg::full(), SliceArg::full()]).unwrap();
        assert_eq!(s.shape(), shape);
    }
    // An index into the zero dimension is out of range; elsewhere it is fine.
    let f = file_of("F32", &[huge, 0, huge], &[]);
    let t = f.tensor("t").unwrap();
    let s = t.slice(&[SliceArg::Index(-1)]).unwrap();
    assert_eq!(s.shape(), &[0, huge]);
    let s = t
        .slice(&[SliceArg::Index(7), SliceArg::full(), SliceArg::Index(-1)])
        .unwrap();
    assert_eq!(s.shape(), &[0]);
    assert!(t.slice(&[SliceArg::full(), SliceArg::Index(0)]).is_err());
}
