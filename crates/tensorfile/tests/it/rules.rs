//! Reader rules on hand-made headers: what the rules allow, what they
//! forbid, and the order in which violations are reported.

use std::borrow::Cow;
use std::io::{Cursor, Read, Seek, SeekFrom};
use tensorfile::Decode;

use tensorfile::{read_header, Dtype, FormatError, ReadOptions, SafeTensors};
use tensorfile_core::Error;

/// A file from header text and data, N as given by the text's length.
fn file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn read(header: &str, data: &[u8]) -> Result<SafeTensors, Error> {
    SafeTensors::from_source(
        tensorfile_core::file::Backing::Owned(file(header, data)),
        &Default::default(),
    )
}

fn rule_of(header: &str, data: &[u8]) -> u8 {
    match read(header, data) {
        Ok(_) => panic!("accepted: {header}"),
        Err(e) => e
            .rule()
            .unwrap_or_else(|| panic!("not a format error: {e}")),
    }
}

#[test]
fn accepts_what_the_rules_allow() {
    // N not a multiple of 8, white space around the object.
    let f = read(
        " \n{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}\t\r\n ",
        &[1, 2],
    )
    .unwrap();
    assert_eq!(f.tensor("a").unwrap().data(), &[1, 2]);
    // Tensors listed in any order; zero-size tensors sorted by begin, then end.
    let h = r#"{"c":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},
               "z":{"dtype":"F32","shape":[0,4],"data_offsets":[2,2]},
               "s":{"dtype":"U16","shape":[],"data_offsets":[0,2]},
               "e":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#;
    let f = read(h, &[1, 0, 7]).unwrap();
    let order: Vec<&str> = f.names().collect();
    assert_eq!(order, ["e", "s", "z", "c"]);
    assert_eq!(f.tensor("s").unwrap().shape(), &[] as &[u64]);
    assert_eq!(f.tensor("s").unwrap().numel(), 1);
    assert_eq!(&*f.tensor("s").unwrap().as_slice::<u16>().unwrap(), &[1]);
    // __metadata__ null means no metadata; {} is an empty map.
    assert!(read(r#"{"__metadata__":null}"#, &[])
        .unwrap()
        .metadata()
        .is_none());
    assert!(read(r#"{"__metadata__":{}}"#, &[])
        .unwrap()
        .metadata()
        .unwrap()
        .is_empty());
    // An empty header object: no tensors, no data.
    assert!(read("{}", &[]).unwrap().is_empty());
    // Escapes are unescaped in names and metadata.
    let f = read(r#"{"__metadata__":{"k\n":"v\u00e9"},"a\"b":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}}"#, &[1]).unwrap();
    assert!(f.get("a\"b").is_some());
    assert_eq!(f.metadata().unwrap()["k\n"], "vé");
}

#[test]
fn unknown_fields_are_ignored_with_a_warning() {
    let f = read(
        r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":[1,{"x":2}]}}"#,
        &[0],
    )
    .unwrap();
    assert_eq!(f.header().warnings().len(), 1);
    assert!(f.header().warnings()[0].contains("extra"));
}

#[test]
fn duplicates_anywhere_are_rule_2() {
    let entry = r#"{"dtype":"U8","shape":[1],"data_offsets":[0,1]}"#;
    // Tensor names compared after unescaping.
    let h = format!(r#"{{"a":{entry},"\u0061":{entry}}}"#);
    assert_eq!(rule_of(&h, &[0]), 2);
    // A field twice inside an entry.
    assert_eq!(
        rule_of(
            r#"{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
            &[0]
        ),
        2
    );
    // An unknown field twice.
    assert_eq!(
        rule_of(
            r#"{"a":{"x":1,"dtype":"U8","x":2,"shape":[1],"data_offsets":[0,1]}}"#,
            &[0]
        ),
        2
    );
    // __metadata__ twice, and a metadata key twice (escaped the second time).
    assert_eq!(rule_of(r#"{"__metadata__":{},"__metadata__":{}}"#, &[]), 2);
    assert_eq!(
        rule_of(r#"{"__metadata__":{"k":"1","\u006b":"2"}}"#, &[]),
        2
    );
    // A metadata key twice where the first value was not a string: still rule 2.
    assert_eq!(rule_of(r#"{"__metadata__":{"k":1,"k":"2"}}"#, &[]), 2);
}

#[test]
fn duplicate_key_position_points_at_the_second_key() {
    let h = r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#;
    match read(h, &[]) {
        Err(Error::Format(FormatError::DuplicateKey { key, pos, .. })) => {
            assert_eq!(key, "a");
            assert_eq!(&h[pos..pos + 3], "\"a\"");
            assert!(pos > 1);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_first_rule_broken_is_reported() {
    let bad4 = r#""a":{"dtype":"X","shape":[1],"data_offsets":[0,1]}"#;
    let ok = r#""b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}"#;
    // Rule 4 first in the text, rule 3 later: rule 3.
    assert_eq!(
        rule_of(&format!(r#"{{{bad4},"__metadata__":{{"k":1}}}}"#), &[0]),
        3
    );
    // Rule 4 first, then a duplicate key: rule 2.
    assert_eq!(rule_of(&format!(r#"{{{bad4},{ok},{ok}}}"#), &[0]), 2);
    // Rule 4, then a JSON syntax error: rule 2.
    assert_eq!(rule_of(&format!(r#"{{{bad4},{ok}"#), &[0]), 2);
    // Rule 4 and rule 5 (gap): rule 4.
    let gap = r#""c":{"dtype":"U8","shape":[1],"data_offsets":[5,6]}"#;
    assert_eq!(rule_of(&format!(r#"{{{bad4},{gap}}}"#), &[0]), 4);
    // Rule 1 beats everything: a header over the cap.
    let opts = ReadOptions::default().max_header_len(4);
    let err = SafeTensors::from_source(file("{}     ", &[]), &opts).unwrap_err();
    assert_eq!(err.rule(), Some(1));
}

#[test]
fn malformed_entries_are_rule_4() {
    for h in [
        r#"{"a":1}"#,
        r#"{"a":[1]}"#,
        r#"{"a":{"dtype":7,"shape":[0],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":"[0]","data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[null],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[1e30],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,-1]}}"#,
        r#"{"a":{"dtype":"U8","shape":[0]}}"#,
        r#"{"a":{"shape":[0],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,2]}}"#,
        r#"{"a":{"dtype":"F4","shape":[18446744073709551615],"data_offsets":[0,0]}}"#,
    ] {
        assert_eq!(rule_of(h, &[]), 4, "{h}");
    }
    // Sub-byte dtypes that fill whole bytes are fine.
    assert!(read(
        r#"{"a":{"dtype":"F6_E3M2","shape":[2,2],"data_offsets":[0,3]}}"#,
        &[0; 3]
    )
    .is_ok());
    assert!(read(
        r#"{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}"#,
        &[0]
    )
    .is_ok());
}

#[test]
fn metadata_must_be_strings() {
    assert_eq!(rule_of(r#"{"__metadata__":[]}"#, &[]), 3);
    assert_eq!(rule_of(r#"{"__metadata__":{"k":{"x":"y"}}}"#, &[]), 3);
    assert_eq!(rule_of(r#"{"__metadata__":{"k":null}}"#, &[]), 3);
}

/// A stream that counts the bytes read from it.
struct Counting<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

impl<R: Seek> Seek for Counting<R> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

#[test]
fn header_only_reading_never_reads_the_data() {
    let h = r#"{"a":{"dtype":"F32","shape":[1024],"data_offsets":[0,4096]}}"#;
    let bytes = file(h, &[0; 4096]);
    let mut stream = Counting {
        inner: Cursor::new(&bytes),
        read: 0,
    };
    let header = read_header(&mut stream, &ReadOptions::default()).unwrap();
    assert_eq!(header.get("a").unwrap().data_offsets, (0, 4096));
    assert_eq!(stream.read, 8 + h.len() as u64);
    // Offsets are still checked against the stream's length.
    let short = file(h, &[0; 4095]);
    let err = read_header(Cursor::new(&short), &ReadOptions::default()).unwrap_err();
    assert_eq!(err.rule(), Some(5));
}

#[test]
fn typed_views_borrow_when_aligned_and_copy_when_not() {
    // N = 61: data starts at byte 69, so an F32 at data offset 0 is unaligned
    // in a buffer whose base is aligned.
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}      "#;
    let data: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let f = read(h, &data).unwrap();
    let t = f.tensor("a").unwrap();
    let values = t.as_slice::<f32>().unwrap();
    assert_eq!(&*values, &[1.5, -2.0]);
    assert_eq!(
        matches!(values, Cow::Borrowed(_)),
        t.is_aligned_for::<f32>()
    );
    assert_eq!(t.to_f64_vec().unwrap(), [1.5, -2.0]);
    assert!(matches!(
        t.as_slice::<u32>(),
        Err(Error::DtypeMismatch {
            requested: Dtype::U32,
            ..
        })
    ));
    let f = read(
        r#"{"b":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}"#,
        &[0xff],
    )
    .unwrap();
    let err = f.tensor("b").unwrap().to_f32_vec().unwrap_err();
    assert!(
        matches!(err.core(), Some(Error::UnsupportedDtype { .. })),
        "{err}"
    );
}

#[test]
fn warnings_stay_small_whatever_the_header_holds() {
    // A long name with thousands of unknown fields: one short warning.
    let name = "n".repeat(50_000);
    let fields: String = (0..5_000).map(|i| format!(r#""x{i}":{i},"#)).collect();
    let h = format!(r#"{{"{name}":{{{fields}"dtype":"U8","shape":[0],"data_offsets":[0,0]}}}}"#);
    let f = read(&h, &[]).unwrap();
    let warnings = f.header().warnings();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].len() < 512, "{}", warnings[0].len());
    assert!(warnings[0].contains("and 4997 more"));
    // Many tensors with unknown fields: at most 100 warnings and a count.
    let entries: Vec<String> = (0..1_000)
        .map(|i| format!(r#""t{i}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1}}"#))
        .collect();
    let f = read(&format!("{{{}}}", entries.join(",")), &[]).unwrap();
    let warnings = f.header().warnings();
    assert_eq!(warnings.len(), 101);
    assert_eq!(warnings[100], "900 more warnings not shown");
}
