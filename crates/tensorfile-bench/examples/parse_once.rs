//! One parse in a process of its own, for peak resident memory as the
//! system sees it (`/usr/bin/time -v`: "Maximum resident set size"), which
//! the benchmark's heap counter cannot give per case in one process. Prints
//! the parse's wall time and the time the thread was on a CPU (the fairer
//! figure on a shared machine).
//!
//! ```text
//! parse_once unknown FIELDS PATH     write a file of one entry with FIELDS unknown fields
//! parse_once known TENSORS PATH      write a file of TENSORS ordinary entries
//! parse_once read PATH               only read the file (the baseline to subtract)
//! parse_once ours PATH               read it, then Header::from_file_bytes
//! parse_once reference PATH          read it, then safetensors::SafeTensors::deserialize
//! ```

#[path = "../src/fixture.rs"]
#[allow(dead_code)]
mod fixture;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("parse_once: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let count = |s: &String| s.parse::<usize>().map_err(|e| format!("{s:?}: {e}"));
    match args {
        [what, n, path] if what == "unknown" => {
            let header = fixture::unknown_fields_header(count(n)?);
            let len = fixture::write_header_file(Path::new(path), &header, 8)
                .map_err(|e| e.to_string())?;
            println!("header {len} bytes");
        }
        [what, n, path] if what == "known" => {
            let len = fixture::write_file(Path::new(path), &fixture::many_small(count(n)?))
                .map_err(|e| e.to_string())?;
            println!("header {len} bytes");
        }
        [what, path] => {
            let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
            let cpu = cpu_time();
            let start = Instant::now();
            let tensors = match what.as_str() {
                "read" => 0,
                "ours" => {
                    let options = tensorfile::ReadOptions::default();
                    tensorfile::Header::from_file_bytes(&bytes, &options)
                        .map_err(|e| e.to_string())?
                        .len()
                }
                "reference" => safetensors::SafeTensors::deserialize(&bytes)
                    .map_err(|e| e.to_string())?
                    .len(),
                other => return Err(format!("unknown mode {other:?}")),
            };
            let wall = start.elapsed();
            match (cpu, cpu_time()) {
                (Some(a), Some(b)) => println!(
                    "{what}: {tensors} tensors in {wall:?} (on a CPU {:?})",
                    b.saturating_sub(a)
                ),
                _ => println!("{what}: {tensors} tensors in {wall:?}"),
            }
        }
        _ => return Err("usage: see the source's header comment".into()),
    }
    Ok(())
}

/// Time this thread has spent on a CPU (Linux: `/proc/thread-self/schedstat`),
/// which a loaded machine's waiting does not inflate; `None` elsewhere.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = stat.split_whitespace().next()?.parse::<u64>().ok()?;
    Some(Duration::from_nanos(ns))
}
