//! How the text output words what it prints: a count with its noun
//! ([`plural`]), byte and parameter counts with a human form beside them
//! ([`bytes`], [`count`]), and rows whose columns line up ([`table`]).
//! Every command's text output goes through these, so that "1 tensor" and
//! "1912 bytes (1.9 KiB)" read the same everywhere; JSON keeps the raw
//! numbers.

use unicode_width::UnicodeWidthStr;

/// `n` and the noun, plural unless `n` is 1: `1 tensor`, `2 tensors`,
/// `3 aliases`, `2 retries`, `1 metadata key`. The last word of `noun`
/// takes the ending (English's regular rules: `-es` after s, x, ch, sh;
/// `-ies` for a consonant then y).
pub fn plural(n: impl Into<u128>, noun: &str) -> String {
    let n = n.into();
    format!("{n} {}", noun_for(n, noun))
}

/// A [`count`] and the noun, plural unless `n` is 1: `107520 (107.5K)
/// values`.
pub fn counted(n: impl Into<u128>, noun: &str) -> String {
    let n = n.into();
    format!("{} {}", count(n), noun_for(n, noun))
}

/// `noun` as `n` of it: singular for 1, else plural.
fn noun_for(n: u128, noun: &str) -> String {
    if n == 1 {
        return noun.to_string();
    }
    let vowel_y = ["ay", "ey", "oy", "uy"].iter().any(|e| noun.ends_with(e));
    if ["s", "x", "ch", "sh"].iter().any(|e| noun.ends_with(e)) {
        format!("{noun}es")
    } else if noun.ends_with('y') && !vowel_y {
        format!("{}ies", &noun[..noun.len() - 1])
    } else {
        format!("{noun}s")
    }
}

/// `x` divided by `base` until it is below it, in one of `units`,
/// with one decimal unless it is 0 (`1.9`, `107.5`, `211`).
fn scaled(x: f64, base: f64, units: &[&str]) -> String {
    let shown = |x: f64| {
        let text = format!("{x:.1}");
        match text.strip_suffix(".0") {
            Some(whole) => whole.to_string(),
            None => text,
        }
    };
    let mut x = x;
    let mut unit = 0;
    // Scaled while the figure shown would reach the base (1023.97 KiB
    // shows as 1.0 MiB, not 1024 KiB).
    while unit + 1 < units.len() && shown(x).parse::<f64>().unwrap_or(x) >= base {
        x /= base;
        unit += 1;
    }
    format!("{}{}", shown(x), units[unit])
}

/// A byte count and its binary form: `1912 bytes (1.9 KiB)`; below 1 KiB
/// the bytes alone (`512 bytes`, `1 byte`).
pub fn bytes(n: u64) -> String {
    let raw = plural(n, "byte");
    if n < 1024 {
        return raw;
    }
    let units = [" B", " KiB", " MiB", " GiB", " TiB", " PiB", " EiB"];
    format!("{raw} ({})", scaled(n as f64, 1024.0, &units))
}

/// A count (parameters, values) and its short decimal form:
/// `107520 (107.5K)`, `7241732096 (7.2B)`; below 1000 the count alone.
pub fn count(n: impl Into<u128>) -> String {
    let n = n.into();
    if n < 1000 {
        return n.to_string();
    }
    format!("{n} ({})", short(n as f64))
}

/// A figure in its short decimal form: `0.5`, `12.3`, `350`, `107.5K`,
/// `7.2B` (a rate, or a count beside its digits).
pub fn short(x: f64) -> String {
    scaled(x, 1000.0, &["", "K", "M", "B", "T", "Q"])
}

/// A statistic in a few digits: `0`, `0.1235`, `1.235e-5`, `inf`
/// (`stats` and `diff`).
pub fn fig(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if !x.is_finite() {
        format!("{x}")
    } else if (1e-3..1e4).contains(&x.abs()) {
        format!("{x:.4}")
    } else {
        format!("{x:.3e}")
    }
}

/// How a column of a [`table`] is aligned.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Figures: padded on the left.
    Right,
}

/// Rows of cells as lines whose columns line up, two spaces apart: each
/// column as wide as its widest cell on screen (a cell is measured as
/// printed, so cells of untrusted text must be escaped first), aligned
/// as `align` says (columns past its end to the left). Trailing spaces are
/// dropped; rows may have fewer cells than others.
pub fn table(rows: &[Vec<String>], align: &[Align]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.width())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                let pad = " ".repeat(widths[c] - cell.width());
                match align.get(c).copied().unwrap_or(Align::Left) {
                    Align::Left => {
                        line.push_str(cell);
                        line.push_str(&pad);
                    }
                    Align::Right => {
                        line.push_str(&pad);
                        line.push_str(cell);
                    }
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals() {
        assert_eq!(plural(1u8, "tensor"), "1 tensor");
        assert_eq!(plural(0u8, "tensor"), "0 tensors");
        assert_eq!(plural(2u8, "metadata key"), "2 metadata keys");
        assert_eq!(plural(3u8, "alias"), "3 aliases");
        assert_eq!(plural(2u8, "retry"), "2 retries");
        assert_eq!(plural(2u8, "array"), "2 arrays");
        assert_eq!(plural(1u8, "retry"), "1 retry");
    }

    #[test]
    fn human_forms_beside_raw_counts() {
        assert_eq!(bytes(1), "1 byte");
        assert_eq!(bytes(512), "512 bytes");
        assert_eq!(bytes(1912), "1912 bytes (1.9 KiB)");
        assert_eq!(bytes(216_064), "216064 bytes (211 KiB)");
        assert_eq!(bytes(1_048_575), "1048575 bytes (1 MiB)");
        assert_eq!(bytes(5_000_000_000), "5000000000 bytes (4.7 GiB)");
        assert_eq!(bytes(u64::MAX), "18446744073709551615 bytes (16 EiB)");
        assert_eq!(count(999u32), "999");
        assert_eq!(count(107_520u32), "107520 (107.5K)");
        assert_eq!(count(999_999u32), "999999 (1M)");
        assert_eq!(count(7_241_732_096u64), "7241732096 (7.2B)");
        assert_eq!(counted(107_520u32, "value"), "107520 (107.5K) values");
        assert_eq!(counted(1u8, "value"), "1 value");
        assert_eq!(short(0.4567), "0.5");
        assert_eq!(short(350.0), "350");
    }

    #[test]
    fn columns_line_up_whatever_the_widths() {
        let rows = vec![
            vec!["name".into(), "dtype".into(), "bytes".into()],
            vec!["a.very.long.tensor.name".into(), "U32".into(), "8".into()],
            vec!["b".into(), "F16 (mlx 4-bit)".into(), "1024".into()],
            vec!["名前".into(), "BF16".into(), "16".into()],
        ];
        let lines = table(&rows, &[Align::Left, Align::Left, Align::Right]);
        // The figures end at one place; a wide name takes its width.
        let ends: Vec<usize> = lines.iter().map(|l| l.width()).collect();
        assert!(ends.iter().all(|&e| e == ends[0]), "{lines:#?}");
        assert_eq!(lines[1], "a.very.long.tensor.name  U32                  8");
        assert_eq!(lines[3], "名前                     BF16                16");
    }
}
