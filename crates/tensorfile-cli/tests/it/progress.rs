//! Progress bars: drawn on a terminal only, within its width, cleared at
//! the end. Run under a pseudo-terminal made by `script` (util-linux).

use std::path::Path;
use std::process::Command;

/// A file of one F32 tensor of `mib` MiB.
fn big_file(path: &Path, mib: usize) {
    let len = mib << 20;
    let header = format!(
        r#"{{"w":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{len}]}}}}"#,
        len / 4
    );
    let mut h = header.into_bytes();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend(h);
    bytes.resize(bytes.len() + len, 0x3f);
    std::fs::write(path, bytes).unwrap();
}

/// What a terminal 80 columns wide shows while `args` runs: the raw bytes
/// the command wrote to it (stdout and stderr).
fn on_a_terminal(args: &[&str]) -> String {
    let bin = env!("CARGO_BIN_EXE_tensorfile");
    let mut line = format!("stty cols 80 rows 24; exec '{bin}'");
    for a in args {
        line.push_str(&format!(" '{a}'"));
    }
    let o = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output()
        .expect("the `script` command (util-linux) makes the pseudo-terminal");
    assert!(
        o.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The visible text of terminal output: escape sequences removed, split
/// where the cursor goes back to the line's start.
fn screen_lines(raw: &str) -> Vec<String> {
    let mut lines = vec![String::new()];
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI: ESC [ parameters final-byte.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for f in chars.by_ref() {
                        if ('@'..='~').contains(&f) {
                            break;
                        }
                    }
                }
                lines.push(String::new());
            }
            '\r' | '\n' => lines.push(String::new()),
            c => lines.last_mut().unwrap().push(c),
        }
    }
    lines.retain(|l| !l.trim().is_empty());
    lines
}

fn check_bar(raw: &str, what: &str) {
    let lines = screen_lines(raw);
    let bars: Vec<&String> = lines.iter().filter(|l| l.starts_with(what)).collect();
    assert!(!bars.is_empty(), "no {what} bar in {lines:?}");
    for b in bars {
        assert!(b.chars().count() <= 80, "wider than the terminal: {b:?}");
        assert!(b.contains("MiB"), "{b:?}");
    }
}

#[test]
fn long_commands_draw_a_bar_that_fits_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    big_file(&input, 48);
    let input = input.to_str().unwrap();
    let output = dir.path().join("out.safetensors");
    let output = output.to_str().unwrap();
    check_bar(
        &on_a_terminal(&["rewrite", "--no-sync", input, output]),
        "rewrite",
    );
    check_bar(
        &on_a_terminal(&["convert", "--no-sync", "--dtype", "bf16", input, output]),
        "convert",
    );
    let raw = on_a_terminal(&["inspect", "--hash", input]);
    check_bar(&raw, "hashing");
    // The bar is cleared before the result is printed.
    let lines = screen_lines(&raw);
    let first_result = lines.iter().position(|l| l.starts_with("file:")).unwrap();
    assert!(lines[first_result..]
        .iter()
        .all(|l| !l.starts_with("hashing")));
}

#[test]
fn validate_of_many_files_counts_them_on_a_bar() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..3000 {
        big_file(&dir.path().join(format!("s{i:05}.safetensors")), 0);
    }
    let bin = env!("CARGO_BIN_EXE_tensorfile");
    let line = format!(
        "stty cols 80 rows 24; exec '{bin}' validate '{}'/*.safetensors",
        dir.path().display()
    );
    let o = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output()
        .expect("the `script` command (util-linux) makes the pseudo-terminal");
    assert!(o.status.success());
    let lines = screen_lines(&String::from_utf8_lossy(&o.stdout));
    let bars: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("validating"))
        .collect();
    assert!(!bars.is_empty(), "no validating bar in {:?}", &lines[..10]);
    for b in &bars {
        assert!(b.chars().count() <= 80, "wider than the terminal: {b:?}");
        assert!(b.contains("/3,000 inputs"), "{b:?}");
    }
    // Every verdict is printed whole, on a line of its own.
    let verdicts = lines
        .iter()
        .filter(|l| l.ends_with(".safetensors: ok"))
        .count();
    assert_eq!(verdicts, 3000);
}

#[test]
fn piped_output_has_no_bar() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    big_file(&input, 8);
    let output = dir.path().join("out.safetensors");
    let o = Command::new(env!("CARGO_BIN_EXE_tensorfile"))
        .args(["rewrite", "--no-sync"])
        .arg(&input)
        .arg(&output)
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn fetch_draws_a_bar_on_a_terminal_and_nothing_when_piped() {
    use tensorfile_testkit::serve::Server;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    big_file(&input, 16);
    let server = Server::start().unwrap();
    server.put_file("/m/in.safetensors", &input).unwrap();
    // Each answer 20 ms late, 1 MB at a time, two in flight: the copy takes
    // long enough for the bar to be drawn more than once.
    server.set_latency(std::time::Duration::from_millis(20));
    let url = format!("{}/m/in.safetensors", server.url());
    let dest = dir.path().join("tty.safetensors");
    let dest = dest.to_str().unwrap();
    let fetch = |dest: &str| {
        vec![
            "fetch".to_string(),
            "--no-sync".into(),
            "--concurrency".into(),
            "2".into(),
            "--chunk-size".into(),
            "1MB".into(),
            url.clone(),
            dest.to_string(),
        ]
    };
    let args = fetch(dest);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let raw = on_a_terminal(&args);
    check_bar(&raw, "fetching");
    // The bar is cleared before the result is printed.
    let lines = screen_lines(&raw);
    let last_bar = lines
        .iter()
        .rposition(|l| l.starts_with("fetching"))
        .unwrap();
    assert!(
        last_bar + 1 < lines.len(),
        "no result after the bar: {lines:?}"
    );
    assert_eq!(std::fs::read(dest).unwrap(), std::fs::read(&input).unwrap());

    // Piped: the result on stdout, nothing on stderr.
    let piped = dir.path().join("piped.safetensors");
    let o = Command::new(env!("CARGO_BIN_EXE_tensorfile"))
        .args(fetch(piped.to_str().unwrap()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.stdout.is_empty());
    assert_eq!(
        std::fs::read(piped).unwrap(),
        std::fs::read(&input).unwrap()
    );
}
