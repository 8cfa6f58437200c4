//! The header scanner accepts exactly the JSON serde_json accepts: on
//! hand-written cases and on many mutated headers, "is this valid JSON" gets
//! the same answer from both (duplicates and the format's own rules aside,
//! which come after syntax).

use tensorfile::{FormatError, Header};
use tensorfile_testkit::Rng;

/// Our verdict on syntax alone: `false` only for a JSON syntax error, or a
/// number out of the range serde_json reads (which it reports as malformed).
fn we_accept_syntax(text: &str) -> bool {
    !matches!(
        Header::parse(text.as_bytes(), 0),
        Err(FormatError::Json { .. } | FormatError::NumberOutOfRange { .. })
    )
}

fn serde_accepts(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok()
}

/// Only objects are compared: for anything else our parser stops at the
/// first byte with "not an object".
fn comparable(text: &str) -> bool {
    text.trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
}

const ENTRY: &str = r#"{"dtype":"U8","shape":[0],"data_offsets":[0,0]}"#;

#[test]
fn hand_written_cases_agree_with_serde_json() {
    let cases = [
        "{}",
        " { } ",
        "{\n\"a\" : {\"dtype\" :\"U8\" , \"shape\":[ 0 ],\"data_offsets\":[0 , 0]}\r\n}\t",
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":{"y":[1,-2.5e3,true,false,null,"s\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"]}}}"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":[[[[]]],{},[{}]]}}"#,
        r#"{"a\u0000b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],}}"#,
        r#"{"a":{"dtype":"U8","shape":[0,],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[01],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[1.],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[.5],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[+1],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[1e],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[1E+2],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":[1e400,-1e309]}}"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1.7976931348623158e308}}"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1.7976931348623159e308}}"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":0e99999999999}}"#,
        r#"{"__metadata__":{"k":1e400}}"#,
        r#"{"a":{"dtype":"U8","shape":[tru],"data_offsets":[0,0]}}"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}} x"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}"#,
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},}"#,
        r#"{"a" {"dtype":"U8"}}"#,
        r#"{a:1}"#,
        r#"{"\ud800":1}"#,
        r#"{"\udc00":1}"#,
        r#"{"\ud800\u0041":1}"#,
        r#"{"\x":1}"#,
        r#"{"\u12G4":1}"#,
        "{\"a\tb\":1}",
        r#"{"__metadata__":{"k":"v","n":[1,{"z":null}]}}"#,
        r#"{"__metadata__":null}"#,
        r#"{"__metadata__":nul}"#,
        "",
        "   ",
    ];
    for text in cases {
        if comparable(text) {
            assert_eq!(we_accept_syntax(text), serde_accepts(text), "{text}");
        }
    }
}

#[test]
fn nesting_limit_matches_serde_json() {
    for depth in [100, 124, 125, 126, 127, 128, 200, 5000] {
        let value = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let text =
            format!(r#"{{"a":{{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":{value}}}}}"#);
        assert_eq!(
            we_accept_syntax(&text),
            serde_accepts(&text),
            "depth {depth}"
        );
    }
}

#[test]
fn mutated_headers_agree_with_serde_json() {
    let seeds = [
        format!(
            r#"{{"__metadata__":{{"format":"pt","k\n":"\u00e9"}},"a":{ENTRY},"b\"c":{ENTRY}}}"#
        ),
        format!(
            r#"{{ "a" : {ENTRY} , "x" : {{"dtype":"F32","shape":[2, 3],"data_offsets":[0 ,24],"u":[1,2.5,-3e2,"s",null,true,{{"k":[]}}]}} }}"#
        ),
        r#"{"t":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}}"#.to_string(),
    ];
    // Tokens that matter to a JSON scanner, huge exponents and digit runs
    // among them (serde_json refuses numbers past f64 as out of range).
    const TOKENS: &[&str] = &[
        "{", "}", "[", "]", "\"", ",", ":", " ", "\n", "\t", "\\", "\\u", "\\ud83d", "0", "1", "-",
        ".", "e", "+", "true", "null", "fals", "\u{1}", "é", "01", "1.5", "[]", "{}", "\\n",
        "e400", "e308", "e-400", "1e99999999999", "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792",
    ];
    let mut rng = Rng::new(0x5eed_1234_abcd_0001);
    let mut compared = 0;
    for round in 0..20_000 {
        let mut text = seeds[round % seeds.len()].clone();
        for _ in 0..1 + rng.below(3) {
            let mut at = rng.below(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            match rng.below(3) {
                0 => text.insert_str(at, TOKENS[rng.below(TOKENS.len())]),
                1 if at < text.len() => {
                    let mut end = at + 1;
                    while !text.is_char_boundary(end) {
                        end += 1;
                    }
                    text.replace_range(at..end, "");
                }
                _ => {
                    let mut end = (at + 1 + rng.below(4)).min(text.len());
                    while !text.is_char_boundary(end) {
                        end += 1;
                    }
                    text.replace_range(at..end, TOKENS[rng.below(TOKENS.len())]);
                }
            }
        }
        if comparable(&text) {
            assert_eq!(we_accept_syntax(&text), serde_accepts(&text), "{text}");
            compared += 1;
        }
    }
    assert!(compared > 10_000);
}
