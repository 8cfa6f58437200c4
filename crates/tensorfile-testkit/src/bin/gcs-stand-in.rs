//! The GCS stand-in ([`tensorfile_testkit::gcs::GcsServer`]) as a process
//! of its own, for tests that are not in Rust (the Python package's):
//! `gcs-stand-in KEYFILE [BUCKET...]` makes each bucket (private; a name
//! ending in `+public` makes a public one, without the suffix), writes the
//! service account's key file to KEYFILE, prints its URL on one line and
//! serves until it is killed or its parent process ends.

use std::io::Write;
use std::time::Duration;

use tensorfile_testkit::gcs::GcsServer;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(key_file) = args.next() else {
        eprintln!("usage: gcs-stand-in KEYFILE [BUCKET[+public]...]");
        std::process::exit(2);
    };
    let server = GcsServer::start();
    for bucket in args {
        match bucket.strip_suffix("+public") {
            Some(name) => server.create_bucket(name, true),
            None => server.create_bucket(&bucket, false),
        }
    }
    if let Err(e) = std::fs::write(&key_file, server.service_account_key()) {
        eprintln!("gcs-stand-in: {key_file}: {e}");
        std::process::exit(1);
    }
    let mut out = std::io::stdout();
    // The caller reads this line to know the server is up.
    if writeln!(out, "{}", server.url())
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(1);
    }
    // Until the parent ends (this process is then another's child): a
    // script killed before its cleanup does not leave the server behind.
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    while unsafe { libc::getppid() } == parent {
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(server);
}
