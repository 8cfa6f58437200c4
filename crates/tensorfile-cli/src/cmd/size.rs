//! Sizes given on the command line (`--max-shard-size 5GB`,
//! `--chunk-size 8MB`).

/// Parses a shard size the way huggingface_hub does: a number of bytes, or a
/// number (decimals allowed) followed by `KB`, `MB`, `GB` or `TB`, decimal
/// units (`5GB` = 5,000,000,000), any case. The result is truncated to whole
/// bytes.
///
/// The error says what a size looks like (clap prints it as a usage error).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad =
        || format!("`{text}` is not a size: expected bytes or a number with KB, MB, GB or TB");
    let s = text.trim();
    let upper = s.to_ascii_uppercase();
    let (number, scale) = match ["KB", "MB", "GB", "TB"]
        .iter()
        .zip([3u32, 6, 9, 12])
        .find(|(unit, _)| upper.ends_with(*unit))
    {
        Some((_, exp)) => (s[..s.len() - 2].trim(), 10u128.pow(exp)),
        None => (s, 1),
    };
    // Exact decimal arithmetic (Python goes through a float; for sizes
    // written with a few digits the results agree).
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    if !(digits(whole) || whole.is_empty() && digits(fraction))
        || !(fraction.is_empty() || digits(fraction))
        || fraction.len() > 12
    {
        return Err(bad());
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let frac_value: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| bad())?
    };
    let frac_scale = 10u128.pow(fraction.len() as u32);
    let bytes = whole
        .checked_mul(scale)
        .and_then(|w| w.checked_add(frac_value * scale / frac_scale))
        .ok_or_else(bad)?;
    u64::try_from(bytes).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        for (text, bytes) in [
            ("5GB", 5_000_000_000),
            ("5 gb", 5_000_000_000),
            ("1KB", 1000),
            ("2TB", 2_000_000_000_000),
            ("0.5MB", 500_000),
            (".5KB", 500),
            ("100", 100),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in [
            "",
            "GB",
            "5GiB",
            "-1",
            "1e3",
            "5 G B",
            "1.2.3MB",
            "99999999999TB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
