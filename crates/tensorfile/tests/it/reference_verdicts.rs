//! Our reader against the reference (`safetensors` 0.8.0) on hand-picked
//! headers: numbers, strings, white space, nesting, duplicates, trailing
//! content. For each case the table says what the reference does and what
//! we do; we may be stricter than the reference (duplicate keys, on
//! purpose), never laxer. Then the typed errors of the refusals this audit
//! added, and duplicate detection among many unknown fields.

use tensorfile::{FormatError, SafeTensors};
use tensorfile_core::Error;

/// A file from header bytes and data, N as given by the header's length.
fn file(header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header);
    out.extend_from_slice(data);
    out
}

/// Our format error on a header with one byte of data.
fn refusal(header: &str) -> FormatError {
    match SafeTensors::from_source(file(header.as_bytes(), &[0]), &Default::default()) {
        Err(Error::Format(e)) => e,
        Err(other) => panic!("not a format error: {other}"),
        Ok(_) => panic!("accepted: {header}"),
    }
}

/// Tensor `a`, U8, one byte, with `extra` appended inside its entry.
fn entry_with(extra: &str) -> String {
    format!(r#"{{"a":{{"dtype":"U8","shape":[1],"data_offsets":[0,1]{extra}}}}}"#)
}

/// Tensor `a`, U8, with this shape text, one byte.
fn shape(dims: &str) -> String {
    format!(r#"{{"a":{{"dtype":"U8","shape":[{dims}],"data_offsets":[0,1]}}}}"#)
}

/// Tensor `a`, U8, one element, with these offsets.
fn offsets(offsets: &str) -> String {
    format!(r#"{{"a":{{"dtype":"U8","shape":[1],"data_offsets":[{offsets}]}}}}"#)
}

/// `__metadata__` with this value, then tensor `a`, one byte.
fn metadata(value: &str) -> String {
    format!(r#"{{"__metadata__":{value},"a":{{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}}}"#)
}

/// What a reader does with a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accept,
    /// Accepted; we also warn (unknown fields).
    AcceptWarn,
    /// Refused; for us, under this rule.
    Refuse(u8),
}
use Verdict::{Accept, AcceptWarn, Refuse};

/// One audit case: its name, header bytes, data, whether the reference
/// accepts it, and our verdict.
type Case = (&'static str, Vec<u8>, Vec<u8>, bool, Verdict);

/// The audit.
fn audit_cases() -> Vec<Case> {
    let d1 = vec![0u8];
    let s = |h: String| h.into_bytes();
    let big = format!("1{}", "0".repeat(400));
    // 2^1024 - 2^970: halfway between f64::MAX and the next power of two,
    // which rounds (to even) past f64::MAX; a hair below it rounds down.
    let halfway = "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792";
    let below = format!("{}1.9999", &halfway[..halfway.len() - 1]);
    let nest = |depth: usize| {
        entry_with(&format!(
            r#","x":{}{}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        ))
    };
    let zero_size = |extra: &str| {
        format!(r#"{{"a":{{"dtype":"U8","shape":[{extra}],"data_offsets":[0,0]}}}}"#).into_bytes()
    };
    let mut overlong = entry_with(r#","x":"?""#).into_bytes();
    let q = overlong.iter().position(|&b| b == b'?').unwrap();
    overlong.splice(q..q + 1, [0xc0, 0xaf]); // '/' as an overlong two-byte sequence
    vec![
        // Numbers where an unsigned integer is required.
        (
            "shape [-0], sizes agree",
            zero_size("-0"),
            vec![],
            false,
            Refuse(4),
        ),
        (
            "shape [2,-0], sizes agree",
            zero_size("2,-0"),
            vec![],
            false,
            Refuse(4),
        ),
        (
            "shape [-0.0]",
            s(shape("-0.0")),
            d1.clone(),
            false,
            Refuse(4),
        ),
        ("shape [1.0]", s(shape("1.0")), d1.clone(), false, Refuse(4)),
        ("shape [1e0]", s(shape("1e0")), d1.clone(), false, Refuse(4)),
        (
            "shape [10e-1]",
            s(shape("10e-1")),
            d1.clone(),
            false,
            Refuse(4),
        ),
        ("shape [-1]", s(shape("-1")), d1.clone(), false, Refuse(4)),
        (
            "shape [2^64]",
            s(shape("18446744073709551616")),
            d1.clone(),
            false,
            Refuse(4),
        ),
        (
            "shape [1e400]",
            s(shape("1e400")),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "shape [10^400]",
            s(shape(&big)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        ("shape [01]", s(shape("01")), d1.clone(), false, Refuse(2)),
        ("shape [+1]", s(shape("+1")), d1.clone(), false, Refuse(2)),
        ("shape [1.]", s(shape("1.")), d1.clone(), false, Refuse(2)),
        ("shape [.5]", s(shape(".5")), d1.clone(), false, Refuse(2)),
        ("shape [1e]", s(shape("1e")), d1.clone(), false, Refuse(2)),
        ("shape [1]", s(shape("1")), d1.clone(), true, Accept),
        (
            "data_offsets [-0,1]",
            s(offsets("-0,1")),
            d1.clone(),
            false,
            Refuse(4),
        ),
        (
            "data_offsets [0,-0], no data",
            s(offsets("0,-0").replace("[1]", "[0]")),
            vec![],
            false,
            Refuse(4),
        ),
        (
            "data_offsets [0.0,1]",
            s(offsets("0.0,1")),
            d1.clone(),
            false,
            Refuse(4),
        ),
        (
            "data_offsets [0,1e400]",
            s(offsets("0,1e400")),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "data_offsets [0,1,2]",
            s(offsets("0,1,2")),
            d1.clone(),
            false,
            Refuse(4),
        ),
        // Numbers in unknown fields: only the range matters.
        (
            "unknown 1e99999999999999999999",
            s(entry_with(r#","x":1e99999999999999999999"#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown 1e400",
            s(entry_with(r#","x":1e400"#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown -1e400",
            s(entry_with(r#","x":-1e400"#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown 10^400",
            s(entry_with(&format!(r#","x":{big}"#))),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown -10^400",
            s(entry_with(&format!(r#","x":-{big}"#))),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown [{\"y\":[1e400]}]",
            s(entry_with(r#","x":[{"y":[1e400]}]"#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown 1.7976931348623159e308",
            s(entry_with(r#","x":1.7976931348623159e308"#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown 2^1024 - 2^970 (halfway)",
            s(entry_with(&format!(r#","x":{halfway}"#))),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown just below halfway",
            s(entry_with(&format!(r#","x":{below}"#))),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown 1.7976931348623158e308",
            s(entry_with(r#","x":1.7976931348623158e308"#)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown 1e308",
            s(entry_with(r#","x":1e308"#)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown 1e-400",
            s(entry_with(r#","x":1e-400"#)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown 1e-99999999999999999999",
            s(entry_with(r#","x":1e-99999999999999999999"#)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown 0e99999999999999999999",
            s(entry_with(r#","x":0e99999999999999999999"#)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown -0.0e99999999999",
            s(entry_with(r#","x":-0.0e99999999999"#)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown 2^64",
            s(entry_with(r#","x":18446744073709551616"#)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown -0",
            s(entry_with(r#","x":-0"#)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown 01",
            s(entry_with(r#","x":01"#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        // Numbers in metadata positions.
        (
            "metadata value 1e400",
            s(metadata(r#"{"k":1e400}"#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "metadata value -0",
            s(metadata(r#"{"k":-0}"#)),
            d1.clone(),
            false,
            Refuse(3),
        ),
        (
            "metadata 1e400",
            s(metadata("1e400")),
            d1.clone(),
            false,
            Refuse(2),
        ),
        ("metadata 0", s(metadata("0")), d1.clone(), false, Refuse(3)),
        (
            "metadata null",
            s(metadata("null")),
            d1.clone(),
            true,
            Accept,
        ),
        // Strings.
        (
            "unknown \"\\ud800\"",
            s(entry_with(r#","x":"\ud800""#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown \"\\udc00\"",
            s(entry_with(r#","x":"\udc00""#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown \"\\ud800\\u0041\"",
            s(entry_with(r#","x":"\ud800\u0041""#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown \"\\ud83d\\ude00\"",
            s(entry_with(r#","x":"\ud83d\ude00""#)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown key \"\\ud800\"",
            s(entry_with(r#","\ud800":1"#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown \"\\q\"",
            s(entry_with(r#","x":"\q""#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown \"\\u12G4\"",
            s(entry_with(r#","x":"\u12G4""#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown raw U+0001",
            s(entry_with(",\"x\":\"a\u{1}b\"")),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown raw tab",
            s(entry_with(",\"x\":\"a\tb\"")),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown raw DEL",
            s(entry_with(",\"x\":\"a\u{7f}b\"")),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown overlong UTF-8",
            overlong,
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "metadata value \"\\ud800\"",
            s(metadata(r#"{"k":"\ud800"}"#)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "dtype \"\\u0055\\u0038\"",
            s(r#"{"a":{"dtype":"\u0055\u0038","shape":[1],"data_offsets":[0,1]}}"#.into()),
            d1.clone(),
            true,
            Accept,
        ),
        (
            "field \"\\u0064type\"",
            s(r#"{"a":{"\u0064type":"U8","shape":[1],"data_offsets":[0,1]}}"#.into()),
            d1.clone(),
            true,
            Accept,
        ),
        (
            "dtype \"u8\"",
            s(r#"{"a":{"dtype":"u8","shape":[1],"data_offsets":[0,1]}}"#.into()),
            d1.clone(),
            false,
            Refuse(4),
        ),
        // White space and what surrounds the object.
        (
            "white space around and inside",
            s(format!(" \t\n\r{}\r\n\t ", shape(" 1 "))),
            d1.clone(),
            true,
            Accept,
        ),
        (
            "form feed after",
            s(format!("{}\u{c}", shape("1"))),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "no-break space after",
            s(format!("{}\u{a0}", shape("1"))),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "BOM before",
            s(format!("\u{feff}{}", shape("1"))),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "NUL padding",
            s(format!("{}\0", shape("1"))),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "trailing x",
            s(format!("{} x", shape("1"))),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "a second object",
            s(format!("{}{{}}", shape("1"))),
            d1.clone(),
            false,
            Refuse(2),
        ),
        ("top-level null", s("null".into()), vec![], false, Refuse(2)),
        // Nesting inside unknown fields: 125 containers in the value is the
        // most (127 with the header and the entry, serde_json's limit).
        (
            "unknown nested 125 deep",
            s(nest(125)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        (
            "unknown nested 126 deep",
            s(nest(126)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "unknown nested 5000 deep",
            s(nest(5000)),
            d1.clone(),
            false,
            Refuse(2),
        ),
        // Duplicates: stricter than the reference on purpose (rule 2).
        (
            "unknown field twice",
            s(entry_with(r#","x":1,"x":2"#)),
            d1.clone(),
            true,
            Refuse(2),
        ),
        (
            "unknown field twice, once escaped",
            s(entry_with(r#","x":1,"\u0078":2"#)),
            d1.clone(),
            true,
            Refuse(2),
        ),
        (
            "dtype twice",
            s(r#"{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#.into()),
            d1.clone(),
            false,
            Refuse(2),
        ),
        (
            "tensor twice",
            s(format!(
                r#"{{"a":{0},"a":{0}}}"#,
                r#"{"dtype":"U8","shape":[1],"data_offsets":[0,1]}"#
            )),
            d1.clone(),
            true,
            Refuse(2),
        ),
        (
            "metadata key twice",
            s(metadata(r#"{"k":"a","k":"b"}"#)),
            d1.clone(),
            true,
            Refuse(2),
        ),
        (
            "__metadata__ twice",
            s(format!(r#"{{"__metadata__":{{}},{}"#, &metadata("{}")[1..])),
            d1.clone(),
            false,
            Refuse(2),
        ),
        // Not checked, as the reference does not: duplicate keys of objects
        // nested inside an unknown field's value.
        (
            "nested object with a key twice",
            s(entry_with(r#","x":{"k":1,"k":2}"#)),
            d1.clone(),
            true,
            AcceptWarn,
        ),
        // Shapes the reference takes that the format does not (stricter).
        (
            "entry as an array",
            s(r#"{"a":["U8",[1],[0,1]]}"#.into()),
            d1.clone(),
            true,
            Refuse(4),
        ),
        (
            "dtype as {\"U8\":null}",
            s(r#"{"a":{"dtype":{"U8":null},"shape":[1],"data_offsets":[0,1]}}"#.into()),
            d1.clone(),
            true,
            Refuse(4),
        ),
        // Overflow is checked dimension by dimension, as the reference does.
        (
            "shape [2^32,2^32,0]",
            zero_size("4294967296,4294967296,0"),
            vec![],
            false,
            Refuse(4),
        ),
    ]
}

#[test]
fn audit_cases_agree_with_the_reference_or_are_stricter() {
    for (case, header, data, reference_accepts, expected) in audit_cases() {
        let bytes = file(&header, &data);
        let theirs = safetensors::SafeTensors::deserialize(&bytes);
        assert_eq!(
            theirs.is_ok(),
            reference_accepts,
            "{case}: the reference's verdict is not the one the table records ({:?})",
            theirs.err()
        );
        let ours = match SafeTensors::from_source(bytes.clone(), &Default::default()) {
            Ok(f) if f.header().warnings().is_empty() => Accept,
            Ok(_) => AcceptWarn,
            Err(e) => Refuse(e.rule().unwrap_or_else(|| panic!("{case}: {e}"))),
        };
        assert_eq!(ours, expected, "{case}");
        if !reference_accepts {
            assert!(
                matches!(ours, Refuse(_)),
                "{case}: laxer than the reference"
            );
        }
    }
}

#[test]
fn negative_zero_is_a_rule_4_error_naming_tensor_field_element_and_position() {
    let h = r#"{"a":{"dtype":"U8","shape":[2,-0],"data_offsets":[0,0]}}"#;
    match SafeTensors::from_source(file(h.as_bytes(), &[]), &Default::default()) {
        Err(Error::Format(FormatError::NegativeZero {
            tensor,
            field,
            index,
            pos,
        })) => {
            assert_eq!((tensor.as_str(), field, index), ("a", "shape", 1));
            assert_eq!(&h[pos..pos + 2], "-0");
        }
        other => panic!("{other:?}"),
    }
    let h = offsets("0,-0");
    match refusal(&h) {
        FormatError::NegativeZero {
            field, index, pos, ..
        } => {
            assert_eq!((field, index), ("data_offsets", 1));
            assert_eq!(&h[pos..pos + 3], "-0]");
        }
        other => panic!("{other:?}"),
    }
    // In an unknown field or metadata, -0 is just a number.
    assert!(SafeTensors::from_source(
        file(entry_with(r#","x":-0"#).as_bytes(), &[0]),
        &Default::default()
    )
    .is_ok());
}

#[test]
fn out_of_range_numbers_are_rule_2_naming_place_and_position() {
    let check = |header: &str, number: &str, place: &str| match refusal(header) {
        FormatError::NumberOutOfRange {
            pos,
            number: quoted,
            place: said,
        } => {
            assert!(header[pos..].starts_with(number), "{header}: pos {pos}");
            assert_eq!(said, place, "{header}");
            assert_eq!(quoted, number, "{header}");
        }
        other => panic!("{header}: {other:?}"),
    };
    check(
        &entry_with(r#","x":1e99999999999999999999"#),
        "1e99999999999999999999",
        r#"field "x" of tensor "a""#,
    );
    // Nested, and the field's name unescaped.
    check(
        &entry_with(r#","\u0078":[{"y":[true,-1e400]}]"#),
        "-1e400",
        r#"field "x" of tensor "a""#,
    );
    check(
        &metadata(r#"{"k":"v","k2":1e400}"#),
        "1e400",
        r#"__metadata__ value of "k2""#,
    );
    check(&shape("1e400"), "1e400", r#"field "shape" of tensor "a""#);
    check(r#"{"a":[1e400]}"#, "1e400", r#"the entry of tensor "a""#);
    // A long number is quoted cut short.
    let digits = format!("9{}", "0".repeat(100_000));
    let err = refusal(&entry_with(&format!(r#","x":{digits}"#)));
    assert!(err.to_string().len() < 300, "{}", err.to_string().len());
    assert!(err.to_string().contains("100001 characters"), "{err}");
}

#[test]
fn the_earliest_violation_of_the_lowest_rule_is_reported() {
    // An out-of-range number in an unknown field beats an earlier rule 4 problem.
    let h = r#"{"a":{"dtype":"X","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[0],"data_offsets":[1,1],"x":1e400}}"#;
    assert!(matches!(refusal(h), FormatError::NumberOutOfRange { .. }));
    // Within rule 2, the earlier in the header: a duplicate unknown field
    // before an out-of-range number, and the other way round.
    let dup_first = entry_with(r#","x":1,"x":2,"y":1e400"#);
    assert!(matches!(
        refusal(&dup_first),
        FormatError::DuplicateKey { ref key, .. } if key == "x"
    ));
    let number_first = entry_with(r#","y":1e400,"x":1,"x":2"#);
    assert!(matches!(
        refusal(&number_first),
        FormatError::NumberOutOfRange { .. }
    ));
    // Duplicates among unknown fields are found when the entry closes, yet
    // one earlier than a known field's duplicate is the one reported.
    let h = r#"{"a":{"u":1,"u":2,"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#;
    match refusal(h) {
        FormatError::DuplicateKey { key, place, pos } => {
            assert_eq!((key.as_str(), place.as_str()), ("u", r#"tensor "a""#));
            assert_eq!(&h[pos..pos + 3], r#""u""#);
            assert_eq!(pos, h.find(r#""u":2"#).unwrap());
        }
        other => panic!("{other:?}"),
    }
    // A duplicate before malformed JSON: the duplicate.
    let h = r#"{"a":{"x":1,"x":2,"dtype":"U8","shape":[1],"data_offsets":[0,1]}"#;
    assert!(matches!(refusal(h), FormatError::DuplicateKey { .. }));
}

/// An entry of tensor `a` (U8, one byte) with `fields` unknown fields
/// `"u0":0,"u1":1,...`, where field `i`'s name is replaced as `rename` says.
fn many_fields(fields: usize, rename: impl Fn(usize) -> Option<String>) -> String {
    let mut h = String::from(r#"{"a":{"dtype":"U8","shape":[1],"#);
    for i in 0..fields {
        match rename(i) {
            Some(name) => h.push_str(&format!(r#""{name}":{i},"#)),
            None => h.push_str(&format!(r#""u{i}":{i},"#)),
        }
    }
    h.push_str(r#""data_offsets":[0,1]}}"#);
    h
}

#[test]
fn duplicates_among_many_unknown_fields_are_found_exactly() {
    const N: usize = 100_000;
    // All distinct: accepted, one warning naming the first three.
    let h = many_fields(N, |_| None);
    let f = SafeTensors::from_source(file(h.as_bytes(), &[0]), &Default::default()).unwrap();
    assert_eq!(
        f.header().warnings(),
        [format!(
            r#"tensor "a": unknown fields "u0", "u1", "u2" and {} more ignored"#,
            N - 3
        )]
    );
    // One repetition anywhere, spelled plainly or escaped, the first
    // occurrence escaped or not: found, at the repetition.
    for (at, name) in [
        (N - 1, "u0".to_string()),
        (N / 2, "u17".to_string()),
        (N / 2, r"\u0075\u0031\u0037".to_string()),
        (1, "u0".to_string()),
    ] {
        let h = many_fields(N, |i| (i == at).then(|| name.clone()));
        match refusal(&h) {
            FormatError::DuplicateKey { key, pos, .. } => {
                let expected_key = if name.contains('\\') { "u17" } else { &name };
                assert_eq!(key, expected_key, "{name} at {at}");
                assert_eq!(
                    pos,
                    h.find(&format!(r#""{name}":{at},"#)).unwrap(),
                    "{name} at {at}"
                );
            }
            other => panic!("{name} at {at}: {other:?}"),
        }
    }
    // The first occurrence escaped, the repetition plain.
    let h = many_fields(N, |i| match i {
        10 => Some(r"\u0078".into()),
        70_000 => Some("x".into()),
        _ => None,
    });
    assert!(matches!(refusal(&h), FormatError::DuplicateKey { ref key, .. } if key == "x"));
    // Two names repeated: "u90000" first appears earlier (at field 40,000)
    // but repeats later (90,000) than "u5" (5, then 60,000). The first
    // repetition in the header is reported.
    let h = many_fields(N, |i| match i {
        60_000 => Some("u5".into()),
        40_000 => Some("u90000".into()),
        _ => None,
    });
    match refusal(&h) {
        FormatError::DuplicateKey { key, .. } => assert_eq!(key, "u5"),
        other => panic!("{other:?}"),
    }
}
