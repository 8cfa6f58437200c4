//! `tensorfile-bench-sets`: one set written by several processes
//! (`StagedSet`: plan, each writer its shards, one commit) against one
//! process saving the same bytes as one file (`save`), both syncing, the
//! tensors made in memory beforehand. Rounds interleave the two; medians
//! and their ratio are printed as Markdown.
//!
//! ```text
//! cargo run --release -p tensorfile-bench --bin tensorfile-bench-sets -- \
//!     --size 4G --writers 4 --rounds 7 --dir /path/on/the/disk
//! ```
//!
//! Each case runs in child processes of this binary: each child makes its
//! tensors (and touches every page), says it is ready, and waits; the
//! clock starts when every child is ready and stops when the last has
//! written (and, for the set, when the commit is done). Making the
//! tensors is not timed in either case.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tensorfile_core::set::{Sharding, StagedPlan, StagedSet};
use tensorfile_core::{save, Dtype, TensorRef, TensorSpec, WriteOptions};

/// Bytes per tensor: 64 MiB.
const TENSOR: u64 = 64 << 20;

fn usage() -> ! {
    eprintln!(
        "usage: tensorfile-bench-sets [--size BYTES|4G] [--writers N] [--rounds N] [--dir DIR]"
    );
    std::process::exit(2)
}

fn parse_size(t: &str) -> u64 {
    let (digits, shift) = match t.chars().last() {
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        _ => (t, 0),
    };
    digits
        .parse::<u64>()
        .map(|n| n << shift)
        .unwrap_or_else(|_| usage())
}

/// The set's tensors: `count` of [`TENSOR`] bytes each.
fn specs(count: u64) -> Vec<TensorSpec> {
    (0..count)
        .map(|i| TensorSpec::new(format!("layer.{i:04}.weight"), Dtype::F32, [TENSOR / 4]))
        .collect()
}

/// Makes the tensors of `specs` in memory, every page touched.
fn make(specs: &[&TensorSpec]) -> Vec<Vec<u8>> {
    specs
        .iter()
        .enumerate()
        .map(|(i, _)| vec![(i % 251) as u8 + 1; TENSOR as usize])
        .collect()
}

/// Says "ready" on stdout, then waits for a line on stdin.
fn ready_then_wait() {
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
}

/// A child: `single OUT COUNT` or `writer OUTDIR PREFIX RANK`.
fn child(args: &[String]) {
    match args[0].as_str() {
        "single" => {
            let count: u64 = args[2].parse().unwrap();
            let all = specs(count);
            let refs: Vec<&TensorSpec> = all.iter().collect();
            let data = make(&refs);
            let tensors: Vec<TensorRef<'_>> = all
                .iter()
                .zip(&data)
                .map(|(s, d)| TensorRef {
                    name: &s.name,
                    dtype: s.dtype,
                    shape: &s.shape,
                    data: d,
                })
                .collect();
            ready_then_wait();
            save(&args[1], tensors, None, &WriteOptions::default()).unwrap();
        }
        "writer" => {
            let set = StagedSet::open(&args[1], &args[2]).unwrap();
            let rank: usize = args[3].parse().unwrap();
            let mine: Vec<&TensorSpec> = set
                .plan()
                .parts_of(rank)
                .into_iter()
                .flat_map(|k| &set.plan().parts()[k].tensors)
                .collect();
            let data = make(&mine);
            let tensors: Vec<TensorRef<'_>> = mine
                .iter()
                .zip(&data)
                .map(|(s, d)| TensorRef {
                    name: &s.name,
                    dtype: s.dtype,
                    shape: &s.shape,
                    data: d,
                })
                .collect();
            ready_then_wait();
            set.write_parts_of(rank, &tensors, true).unwrap();
        }
        _ => usage(),
    }
}

/// Starts children, waits until each is ready, then times from "go" until
/// all have exited.
fn time_children(argvs: &[Vec<String>]) -> Duration {
    let me = std::env::current_exe().unwrap();
    let mut children: Vec<Child> = argvs
        .iter()
        .map(|a| {
            Command::new(&me)
                .arg("--child")
                .args(a)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in &mut children {
        let mut line = String::new();
        BufReader::new(c.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
    }
    let start = Instant::now();
    for c in &mut children {
        c.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let (mut size, mut writers, mut rounds, mut dir) = (4u64 << 30, 4usize, 7usize, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_else(|| usage());
        match a.as_str() {
            "--size" => size = parse_size(&value()),
            "--writers" => writers = value().parse().unwrap_or_else(|_| usage()),
            "--rounds" => rounds = value().parse().unwrap_or_else(|_| usage()),
            "--dir" => dir = Some(PathBuf::from(value())),
            _ => usage(),
        }
    }
    let count = (size / TENSOR).max(writers as u64);
    let scratch = match &dir {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let base: &Path = scratch.path();
    let all = specs(count);
    // One shard per writer.
    let per_shard = (count / writers as u64).max(1) * TENSOR;
    let (mut single, mut set) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Interleaved, the order alternating from round to round.
        for case in [round % 2, 1 - round % 2] {
            if case == 0 {
                let out = base.join("single.safetensors");
                let t = time_children(&[vec![
                    "single".into(),
                    out.display().to_string(),
                    count.to_string(),
                ]]);
                std::fs::remove_file(&out).unwrap();
                single.push(t);
            } else {
                let out = base.join("set");
                let plan = StagedPlan::new(
                    "model",
                    &all,
                    None,
                    &Sharding::MaxSize(per_shard),
                    writers,
                    &WriteOptions::default(),
                )
                .unwrap();
                // The plan is staged before the clock starts (the writers'
                // tensors are made meanwhile); the commit is timed.
                let staged = StagedSet::prepare(&out, plan).unwrap();
                let argvs: Vec<Vec<String>> = (0..writers)
                    .map(|r| {
                        vec![
                            "writer".into(),
                            out.display().to_string(),
                            "model".into(),
                            r.to_string(),
                        ]
                    })
                    .collect();
                let writing = time_children(&argvs);
                let commit_start = Instant::now();
                staged.commit(true).unwrap();
                let t = writing + commit_start.elapsed();
                std::fs::remove_dir_all(&out).unwrap();
                set.push(t);
            }
        }
    }
    let (s, m) = (median(single), median(set));
    let gib = size as f64 / (1u64 << 30) as f64;
    println!("| {gib:.0} GiB, sync on | median of {rounds} | GB/s |");
    println!("|---|---:|---:|");
    println!(
        "| one process, `save` (one file) | {:.2} s | {:.2} |",
        s.as_secs_f64(),
        count as f64 * TENSOR as f64 / 1e9 / s.as_secs_f64()
    );
    println!(
        "| {writers} processes, `StagedSet` (plan, write parts, commit) | {:.2} s | {:.2} |",
        m.as_secs_f64(),
        count as f64 * TENSOR as f64 / 1e9 / m.as_secs_f64()
    );
    println!(
        "| ratio, {writers} processes / one | {:.2}x | |",
        m.as_secs_f64() / s.as_secs_f64()
    );
}
