//! `tensorfile-bench-remote --stores`: the remote figures on every store
//! (issue 34): S3 on moto (our reader), Azure on Azurite and GCS on the
//! testkit's stand-in (both through object_store), all on 127.0.0.1; and
//! S3 reads through our path against object_store's `AmazonS3` on the
//! same moto, request for request.

use std::path::Path;
use std::sync::Arc;

use object_store::{GetOptions, ObjectStore, ObjectStoreExt};
use tensorfile::ReadOptions;
use tensorfile_core::ByteSource;
use tensorfile_remote::fetch::{fetch, FetchOptions};
use tensorfile_remote::store;
use tensorfile_remote::{Client, RemoteOptions};
use tensorfile_testkit::gcs::GcsServer;
use tensorfile_testkit::serve::S3Bucket;

use crate::measure::{fmt_bytes, fmt_time, interleave, speedup, Case, Measured};

/// Where the stores are.
pub struct Stores<'a> {
    /// moto's URL.
    pub s3: Option<&'a str>,
    /// Azurite's blob endpoint.
    pub azure: Option<&'a str>,
}

fn client(concurrency: usize) -> Arc<Client> {
    Client::new(RemoteOptions::default().with_concurrency(concurrency))
}

/// Puts `objects` under the bucket's `prefix` through the store layer
/// (Azure, GCS) or moto's S3 maker.
fn put_all(url_prefix: &str, objects: &[(String, Vec<u8>)]) {
    for (key, bytes) in objects {
        let located = store::locate(&format!("{url_prefix}{key}"), &RemoteOptions::default())
            .expect("a store URL");
        let inner = located.store.store.clone();
        let bytes = bytes.clone();
        store::block_on(
            async move { inner.put(&located.path, bytes.into()).await },
            None,
        )
        .expect("no deadline")
        .expect("put");
    }
}

fn table(title: &str, m: &[Measured], bytes: Option<u64>) {
    println!(
        "| {title} | median | min | max |{}",
        if bytes.is_some() { " rate |" } else { "" }
    );
    println!(
        "| --- | --- | --- | --- |{}",
        if bytes.is_some() { " --- |" } else { "" }
    );
    for r in m {
        let rate = bytes.map_or(String::new(), |b| {
            format!(
                " {:.0} MiB/s |",
                b as f64 / r.median.as_secs_f64() / (1u64 << 20) as f64
            )
        });
        println!(
            "| {} | {} | {} | {} |{rate}",
            r.name,
            fmt_time(r.median),
            fmt_time(r.min),
            fmt_time(r.max)
        );
    }
    println!();
}

/// Runs the per-store figures; `set` is the 100-shard set (index last),
/// `big` the fetched file's bytes.
pub fn run(stores: &Stores<'_>, rounds: usize, set: &[(String, Vec<u8>)], big: &[u8], tmp: &Path) {
    let options = ReadOptions::default();
    let gcs = GcsServer::start();
    gcs.create_bucket("bench", true);
    std::env::set_var("STORAGE_EMULATOR_HOST", gcs.host());
    let mut places: Vec<(&str, String)> = Vec::new();
    let mut objects: Vec<(String, Vec<u8>)> = set
        .iter()
        .map(|(n, b)| (format!("m/{n}"), b.clone()))
        .collect();
    objects.push(("big.safetensors".into(), big.to_vec()));
    if let Some(endpoint) = stores.s3 {
        let b = S3Bucket::create(endpoint, "bench-stores", "bench", "bench-secret").unwrap();
        for (key, bytes) in &objects {
            b.put(key, bytes, false).unwrap();
        }
        places.push(("S3 (moto 5.2.5), our reader", "s3://bench-stores/".into()));
    }
    if let Some(endpoint) = stores.azure {
        tensorfile_testkit::azure::create_container(endpoint, "bench").unwrap();
        std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
        std::env::set_var("AZURITE_BLOB_STORAGE_URL", endpoint);
        put_all("az://bench/", &objects);
        places.push(("Azure (Azurite 3.37), object_store", "az://bench/".into()));
    }
    for (key, bytes) in &objects {
        gcs.put("bench", key, bytes);
    }
    places.push(("GCS (testkit stand-in), object_store", "gs://bench/".into()));

    println!("### Every store: a 100-shard set opened by its index, 16 in flight\n");
    println!("| store | requests | expected |");
    println!("| --- | --- | --- |");
    for (name, prefix) in &places {
        let c = client(16);
        let url = format!("{prefix}m/{}", tensorfile::set::INDEX_NAME);
        let set = tensorfile_remote::open_set(&url, &c, &options).unwrap();
        assert_eq!(set.shards().len(), 100);
        println!("| {name} | {} | 1 + 100 |", c.stats().requests);
    }
    println!();
    let mut cases: Vec<Case<'_>> = places
        .iter()
        .map(|(name, prefix)| {
            let url = format!("{prefix}m/{}", tensorfile::set::INDEX_NAME);
            let options = options.clone();
            Case::new(name.to_string(), 1, move || {
                tensorfile_remote::open_set(&url, &client(16), &options)
                    .unwrap()
                    .len() as u64
            })
        })
        .collect();
    let m = interleave(rounds, &mut cases);
    table("100-shard inspect", &m, None);

    let fetch_options = FetchOptions::default().with_sync(false);
    let mut cases: Vec<Case<'_>> = places
        .iter()
        .enumerate()
        .map(|(i, (name, prefix))| {
            let url = format!("{prefix}big.safetensors");
            let out = tmp.join(format!("fetched-{i}"));
            let clear = out.clone();
            let fetch_options = fetch_options.clone();
            Case::new(name.to_string(), 1, move || {
                let got = fetch(&url, &out, &client(16), &fetch_options, &()).unwrap();
                got.files[0].len
            })
            .with_setup(move || {
                // A file URL fetches to a file: gone, or the next fetch
                // finds it fetched and only asks with a HEAD.
                let _ = std::fs::remove_file(&clear);
                let _ = std::fs::remove_dir_all(&clear);
            })
        })
        .collect();
    let m = interleave(rounds, &mut cases);
    for i in 0..places.len() {
        let _ = std::fs::remove_file(tmp.join(format!("fetched-{i}")));
        let _ = std::fs::remove_dir_all(tmp.join(format!("fetched-{i}")));
    }
    println!(
        "### Every store: fetch of a {} file (16 x 8 MiB, no fsync)\n",
        fmt_bytes(big.len() as u64)
    );
    table("fetch", &m, Some(big.len() as u64));

    if stores.s3.is_some() {
        s3_clients(rounds, set, big.len() as u64);
    }
    std::env::remove_var("STORAGE_EMULATOR_HOST");
}

/// S3 reads on moto, our reader against object_store's `AmazonS3` (made
/// by our store layer, with our endpoint and credentials), the same
/// requests: every shard's first 64 KiB, 16 in flight; the big object in
/// 8 MiB ranges, 8 in flight.
fn s3_clients(rounds: usize, set: &[(String, Vec<u8>)], big_len: u64) {
    let names: Vec<String> = set.iter().map(|(n, _)| n.clone()).collect();
    let located = store::locate(
        "s3://bench-stores/big.safetensors",
        &RemoteOptions::default(),
    )
    .unwrap();
    let os: Arc<dyn ObjectStore> = located.store.store.clone();
    let chunk = 8u64 << 20;
    let ranges: Vec<(u64, u64)> = (0..big_len.div_ceil(chunk))
        .map(|i| (i * chunk, ((i + 1) * chunk).min(big_len)))
        .collect();

    // Splits `items` over `threads` threads, each running `work` on its share.
    fn spread<T: Sync>(items: &[T], threads: usize, work: impl Fn(&T) -> u64 + Sync) -> u64 {
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut n = 0;
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(item) = items.get(i) else { return n };
                            n += work(item);
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        })
    }

    let os_get = |key: String, range: (u64, u64)| -> u64 {
        let os = os.clone();
        let path = object_store::path::Path::from(key.as_str());
        store::block_on(
            async move {
                let answer = os
                    .get_opts(
                        &path,
                        GetOptions {
                            range: Some((range.0..range.1).into()),
                            ..Default::default()
                        },
                    )
                    .await?;
                answer.bytes().await
            },
            None,
        )
        .unwrap()
        .unwrap()
        .len() as u64
    };
    let mut cases = [
        Case::new("our reader (ureq, rusty-s3)", 1, || {
            let dir = tensorfile_remote::dir_of("s3://bench-stores/m/", &client(16)).unwrap();
            spread(&names, 16, |n| {
                dir.open_file(n).unwrap().head_bytes().len() as u64
            })
        }),
        Case::new("object_store AmazonS3", 1, || {
            spread(&names, 16, |n| os_get(format!("m/{n}"), (0, 64 << 10)))
        }),
    ];
    let m = interleave(rounds, &mut cases);
    println!("### S3 reads on moto: our reader against object_store\n");
    table("100 shard headers (64 KiB asked, 16 in flight)", &m, None);
    println!(
        "object_store takes **{:.2}x** our reader's time\n",
        speedup(m[1].median, m[0].median)
    );

    // Opened once (its first 64 KiB read), outside the timing: the ranges
    // alone are timed, as for object_store.
    let file = tensorfile_remote::dir_of("s3://bench-stores/", &client(8))
        .unwrap()
        .open_file("big.safetensors")
        .unwrap();
    let mut cases = [
        Case::new("our reader (ureq, rusty-s3)", 1, || {
            spread(&ranges, 8, |&(a, b)| {
                let mut buf = vec![0u8; (b - a) as usize];
                file.read_exact_at(a, &mut buf).unwrap();
                buf.len() as u64
            })
        }),
        Case::new("object_store AmazonS3", 1, || {
            spread(&ranges, 8, |&r| os_get("big.safetensors".into(), r))
        }),
    ];
    let m = interleave(rounds, &mut cases);
    table(
        &format!("{} in 8 MiB ranges, 8 in flight", fmt_bytes(big_len)),
        &m,
        Some(big_len),
    );
    println!(
        "object_store takes **{:.2}x** our reader's time\n",
        speedup(m[1].median, m[0].median)
    );
}
