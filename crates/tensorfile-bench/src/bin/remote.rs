//! `tensorfile-bench-remote`: remote checkpoints on loopback, the figures
//! issue 20 names. Prints Markdown.
//!
//! ```text
//! cargo run --release -p tensorfile-bench --bin tensorfile-bench-remote -- [--quick] [--s3 URL]
//! ```
//!
//! - **shards**: a 100-shard set opened by its index: the requests made on
//!   S3 (moto's server, `--s3` or `TENSORFILE_TEST_S3`), and the time with
//!   16 requests in flight against 1, on the test server adding 20 ms to
//!   every answer.
//! - **fetch**: a 2 GiB file (`--fetch-size`) fetched by tensorfile and by
//!   `curl -o`, from the test server, interleaved; and by tensorfile and
//!   `aws s3 cp` from moto (256 MiB: moto is slow) where both are there.
//! - **slice**: one row of a 1 GiB tensor: the bytes the server sent.

#[path = "../alloc.rs"]
#[allow(dead_code)]
mod alloc;
#[path = "../measure.rs"]
#[allow(dead_code)]
mod measure;
#[path = "../stores.rs"]
mod stores;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tensorfile::set::Want;
use tensorfile::{ReadOptions, SliceArg};
use tensorfile_remote::fetch::{fetch, FetchOptions};
use tensorfile_remote::{Client, RemoteOptions};
use tensorfile_testkit::serve::{S3Bucket, Server};

use measure::{fmt_bytes, fmt_time, interleave, speedup, Case};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// Remote benchmarks on loopback.
#[derive(Parser, Debug)]
struct Cli {
    /// Fewer rounds and a 256 MiB fetch.
    #[arg(long)]
    quick: bool,
    /// Timed rounds per case (default 5, or 2 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// moto's URL (default: TENSORFILE_TEST_S3); without it the S3 rows are skipped.
    #[arg(long)]
    s3: Option<String>,
    /// Bytes of the fetched file (default 2 GiB, or 256 MiB with --quick).
    #[arg(long)]
    fetch_size: Option<u64>,
    /// Where the files go (a fresh temporary directory inside it).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Only the figures on every store (issue 34): S3 (`--s3`), Azure
    /// (`--azure`), GCS (the testkit's stand-in, always), and S3 reads by
    /// our reader against object_store's; 7 rounds unless `--rounds`.
    #[arg(long)]
    stores: bool,
    /// Azurite's blob endpoint (default: TENSORFILE_TEST_AZURE); without it
    /// the Azure rows are skipped.
    #[arg(long)]
    azure: Option<String>,
    /// Bytes of the file fetched from every store (default 64 MiB: moto is slow).
    #[arg(long)]
    store_fetch_size: Option<u64>,
}

/// A safetensors file of one U8 tensor of `shape`, its data left as a hole
/// (zeros that take no disk).
fn sparse_file(path: &Path, name: &str, shape: &[u64]) -> u64 {
    let n: u64 = shape.iter().product();
    let header =
        format!(r#"{{"{name}":{{"dtype":"U8","shape":{shape:?},"data_offsets":[0,{n}]}}}}"#);
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    let len = 8 + header.len() as u64 + n;
    f.set_len(len).unwrap();
    len
}

/// A small shard: one F32 tensor of 256 values.
fn shard_bytes(name: &str) -> Vec<u8> {
    let data: Vec<u8> = (0..1024u32).map(|i| i as u8).collect();
    let t = tensorfile::TensorRef {
        name,
        dtype: tensorfile::Dtype::F32,
        shape: &[256],
        data: &data,
    };
    tensorfile::serialize([t], None).unwrap()
}

/// The 100-shard set: (file name, bytes), index last.
fn hundred_shards() -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut map = std::collections::BTreeMap::new();
    for i in 1..=100 {
        let name = format!("model-{i:05}-of-00100.safetensors");
        let tensor = format!("layers.{i}.weight");
        files.push((name.clone(), shard_bytes(&tensor)));
        map.insert(tensor, name);
    }
    let index = tensorfile::set::ShardIndex::new(100 * 1024, map);
    files.push((
        tensorfile::set::INDEX_NAME.to_string(),
        index.to_json().into_bytes(),
    ));
    files
}

/// Puts objects into a new bucket of moto's.
fn upload(endpoint: &str, bucket: &str, objects: &[(String, Vec<u8>)]) {
    let b = S3Bucket::create(endpoint, bucket, "bench", "bench-secret").unwrap();
    for (key, bytes) in objects {
        b.put(key, bytes, false).unwrap();
    }
}

fn s3_env(endpoint: &str) {
    std::env::set_var("AWS_ENDPOINT_URL", endpoint);
    std::env::set_var("AWS_ACCESS_KEY_ID", "bench");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "bench-secret");
    std::env::set_var("AWS_REGION", "us-east-1");
}

fn client(concurrency: usize) -> Arc<Client> {
    Client::new(RemoteOptions::default().with_concurrency(concurrency))
}

fn main() {
    let cli = Cli::parse();
    let rounds = cli.rounds.unwrap_or(if cli.quick { 2 } else { 5 });
    let s3 = cli
        .s3
        .clone()
        .or_else(|| std::env::var("TENSORFILE_TEST_S3").ok())
        .filter(|s| !s.is_empty());
    let tmp = match &cli.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .unwrap();
    let options = ReadOptions::default();
    if cli.stores {
        let azure = cli
            .azure
            .clone()
            .or_else(|| std::env::var("TENSORFILE_TEST_AZURE").ok())
            .filter(|s| !s.is_empty());
        if let Some(endpoint) = &s3 {
            s3_env(endpoint);
        }
        let rounds = cli.rounds.unwrap_or(7);
        let size = cli.store_fetch_size.unwrap_or(64 << 20);
        let path = tmp.path().join("store-big.safetensors");
        let cols = 1u64 << 20;
        sparse_file(&path, "t", &[size / cols, cols]);
        let big = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        println!("## Remote checkpoints on every store (loopback)\n");
        println!("rounds: {rounds}; medians, interleaved\n");
        stores::run(
            &stores::Stores {
                s3: s3.as_deref(),
                azure: azure.as_deref(),
            },
            rounds,
            &hundred_shards(),
            &big,
            tmp.path(),
        );
        return;
    }
    println!("## Remote checkpoints (loopback)\n");
    println!("rounds: {rounds}; medians, interleaved\n");

    // --- shards ---
    let set = hundred_shards();
    println!("### inspect of a 100-shard set (index, then every shard's header)\n");
    println!("| source | requests | expected |");
    println!("| --- | --- | --- |");
    if let Some(endpoint) = &s3 {
        s3_env(endpoint);
        let objects: Vec<(String, Vec<u8>)> = set
            .iter()
            .map(|(n, b)| (format!("m/{n}"), b.clone()))
            .collect();
        upload(endpoint, "bench-shards", &objects);
        let c = client(16);
        let url = format!("s3://bench-shards/m/{}", tensorfile::set::INDEX_NAME);
        let opened = tensorfile_remote::open_set(&url, &c, &options).unwrap();
        assert_eq!(opened.shards().len(), 100);
        println!(
            "| S3 (moto), the index's URL | {} | 1 + 100 |",
            c.stats().requests
        );
        let c = client(16);
        tensorfile_remote::open_set("s3://bench-shards/m/", &c, &options).unwrap();
        println!(
            "| S3 (moto), the directory's URL | {} | 1 (listing) + 1 + 100 |",
            c.stats().requests
        );
    } else {
        println!("| S3 (moto) | skipped: no --s3 or TENSORFILE_TEST_S3 | |");
    }
    let server = Server::start().unwrap();
    for (n, b) in &set {
        server.put(&format!("/m/{n}"), b.clone());
    }
    server.set_latency(Duration::from_millis(20));
    let url = format!("{}/m/{}", server.url(), tensorfile::set::INDEX_NAME);
    let c = client(16);
    tensorfile_remote::open_set(&url, &c, &options).unwrap();
    println!(
        "| HTTP, 20 ms per answer | {} | 1 + 100 |\n",
        c.stats().requests
    );
    let mut cases = [1usize, 16].map(|n| {
        let url = url.clone();
        let options = options.clone();
        Case::new(format!("{n} in flight"), 1, move || {
            let set = tensorfile_remote::open_set(&url, &client(n), &options).unwrap();
            set.len() as u64
        })
    });
    let m = interleave(rounds.min(3), &mut cases);
    println!("| 100-shard inspect, 20 ms latency | median | min | max |");
    println!("| --- | --- | --- | --- |");
    for r in &m {
        println!(
            "| {} | {} | {} | {} |",
            r.name,
            fmt_time(r.median),
            fmt_time(r.min),
            fmt_time(r.max)
        );
    }
    println!(
        "\n16 in flight is **{:.1}x** faster than 1 (target: at least 8x)\n",
        speedup(m[0].median, m[1].median)
    );
    server.set_latency(Duration::ZERO);

    // --- fetch ---
    let size = cli
        .fetch_size
        .unwrap_or(if cli.quick { 256 << 20 } else { 2 << 30 });
    let src = tmp.path().join("big.safetensors");
    let cols = 1u64 << 20;
    let len = sparse_file(&src, "t", &[size / cols, cols]);
    server.put_file("/big.safetensors", &src).unwrap();
    let url = format!("{}/big.safetensors", server.url());
    let ours = tmp.path().join("ours");
    let theirs = tmp.path().join("curl.safetensors");
    let fetch_options = FetchOptions::default().with_sync(false);
    let clear = |p: &Path| {
        let _ = std::fs::remove_dir_all(p);
        let _ = std::fs::remove_file(p);
    };
    println!(
        "### fetch of a {} file over loopback (no fsync for either)\n",
        fmt_bytes(len)
    );
    let m = {
        let mut cases = [
            Case::new("tensorfile fetch (16 x 8 MiB)", 1, || {
                let got = fetch(&url, &ours, &client(16), &fetch_options, &()).unwrap();
                got.files[0].len
            })
            .with_setup(|| clear(&ours)),
            Case::new("curl -o", 1, || {
                let s = Command::new("curl")
                    .args(["-s", "-f", "-o"])
                    .arg(&theirs)
                    .arg(&url)
                    .status()
                    .unwrap();
                assert!(s.success());
                std::fs::metadata(&theirs).unwrap().len()
            })
            .with_setup(|| clear(&theirs)),
        ];
        interleave(rounds, &mut cases)
    };
    clear(&ours);
    clear(&theirs);
    println!("| tool | median | min | max | rate | peak heap |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for r in &m {
        let rate = len as f64 / r.median.as_secs_f64() / (1u64 << 20) as f64;
        let peak = if r.name.starts_with("tensorfile") {
            fmt_bytes(r.peak as u64)
        } else {
            "(another process)".into()
        };
        println!(
            "| {} | {} | {} | {} | {rate:.0} MiB/s | {peak} |",
            r.name,
            fmt_time(r.median),
            fmt_time(r.min),
            fmt_time(r.max)
        );
    }
    println!(
        "\ntensorfile / curl: **{:.2}x** the time (target: within 1.3x); peak heap includes the in-process test server's buffers; bound: 16 requests x 64 KiB pieces, not 16 x 8 MiB\n",
        1.0 / speedup(m[1].median, m[0].median)
    );

    if let Some(endpoint) = &s3 {
        let have_aws = Command::new("aws")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if have_aws {
            let n = 256u64 << 20;
            let path = tmp.path().join("s3.safetensors");
            sparse_file(&path, "t", &[n / cols, cols]);
            let bytes = std::fs::read(&path).unwrap();
            upload(
                endpoint,
                "bench-fetch",
                &[("big.safetensors".into(), bytes)],
            );
            let _ = std::fs::remove_file(&path);
            let ours = tmp.path().join("s3-ours");
            let theirs = tmp.path().join("s3-aws.safetensors");
            let mut cases = [
                Case::new("tensorfile fetch s3://", 1, || {
                    let got = fetch(
                        "s3://bench-fetch/big.safetensors",
                        &ours,
                        &client(16),
                        &fetch_options,
                        &(),
                    )
                    .unwrap();
                    got.files[0].len
                })
                .with_setup(|| clear(&ours)),
                Case::new("aws s3 cp", 1, || {
                    let s = Command::new("aws")
                        .args(["s3", "cp", "--quiet", "--endpoint-url", endpoint])
                        .arg("s3://bench-fetch/big.safetensors")
                        .arg(&theirs)
                        .env("AWS_ACCESS_KEY_ID", "bench")
                        .env("AWS_SECRET_ACCESS_KEY", "bench-secret")
                        .env("AWS_DEFAULT_REGION", "us-east-1")
                        .status()
                        .unwrap();
                    assert!(s.success());
                    std::fs::metadata(&theirs).unwrap().len()
                })
                .with_setup(|| clear(&theirs)),
            ];
            let m = interleave(rounds.min(3), &mut cases);
            clear(&ours);
            clear(&theirs);
            println!("| 256 MiB from moto | median | min | max |");
            println!("| --- | --- | --- | --- |");
            for r in &m {
                println!(
                    "| {} | {} | {} | {} |",
                    r.name,
                    fmt_time(r.median),
                    fmt_time(r.min),
                    fmt_time(r.max)
                );
            }
            println!(
                "\ntensorfile / aws s3 cp: **{:.2}x** the time (moto, a Python server, sets the pace for both)\n",
                1.0 / speedup(m[1].median, m[0].median)
            );
        } else {
            println!("aws s3 cp: not installed, skipped\n");
        }
    }

    // --- slice ---
    let path = tmp.path().join("gib.safetensors");
    let (rows, cols) = (32768u64, 32768u64);
    let len = sparse_file(&path, "w", &[rows, cols]);
    server.put_file("/gib.safetensors", &path).unwrap();
    server.reset();
    let c = client(16);
    let url = format!("{}/gib.safetensors", server.url());
    let set = tensorfile_remote::open_set(&url, &c, &options).unwrap();
    let row = set
        .load(&[Want::slice("w", vec![SliceArg::Index(1000)])], 1 << 20)
        .unwrap();
    assert_eq!(row[0].bytes.len() as u64, cols);
    let (requests, sent) = server.counts();
    let probe = 64u64 << 10;
    println!("### one row of a {} tensor\n", fmt_bytes(len));
    println!("| requests | bytes the server sent | row | first read (at most) |");
    println!("| --- | --- | --- | --- |");
    println!("| {requests} | {sent} | {cols} | {probe} |\n");
    println!(
        "sent = row + first read: **{}**\n",
        if sent <= cols + probe { "yes" } else { "no" }
    );
}
