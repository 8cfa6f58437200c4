//! Remote inputs: `s3://`, `hf://`, `http(s)://` URLs wherever a command
//! reads a safetensors file or set, through `tensorfile-remote` (only
//! headers are read until tensors are asked for).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tensorfile::{OpenOptions, ReadOptions};
use tensorfile_remote::{Client, RemoteOptions};

/// The options of every command's remote reads (global: given before or
/// after the command's name).
#[derive(clap::Args)]
pub struct Args {
    /// One deadline, in seconds, for all of the command's remote reads
    /// (URLs), retries and waits included. Default: the TENSORFILE_TIMEOUT
    /// environment variable, else none: a transfer takes as long as it
    /// needs while the server keeps up (connecting within 10 s, answering
    /// within 30 s, at least 1 KiB/s over each 30 s).
    #[arg(long, global = true, value_name = "SECONDS")]
    timeout: Option<String>,
}

/// The deadline of the command's remote reads, as set by [`configure`].
static TIMEOUT: OnceLock<Option<Duration>> = OnceLock::new();

/// Sets the command's remote options from `--timeout`, else
/// `TENSORFILE_TIMEOUT`; a value that is not a positive number of seconds
/// is a usage error.
pub fn configure(args: &Args) -> Result<(), String> {
    let (text, from) = match &args.timeout {
        Some(t) => (Some(t.clone()), "--timeout"),
        None => (
            std::env::var("TENSORFILE_TIMEOUT")
                .ok()
                .filter(|t| !t.trim().is_empty()),
            "TENSORFILE_TIMEOUT",
        ),
    };
    let timeout = match text {
        None => None,
        Some(t) => Some(
            t.trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| format!("{from} {t}: not a positive number of seconds"))?,
        ),
    };
    let _ = TIMEOUT.set(timeout);
    Ok(())
}

/// The options of the command's remote reads: the defaults, with the
/// `--timeout` deadline.
pub fn options() -> RemoteOptions {
    RemoteOptions::default().with_time_budget(TIMEOUT.get().copied().flatten())
}

/// The `--timeout` deadline in seconds, for an operation's request.
pub fn timeout_seconds() -> Option<f64> {
    TIMEOUT.get().copied().flatten().map(|d| d.as_secs_f64())
}

/// The client every remote read of a command goes through (one pool of
/// connections, one bound on requests in flight, one deadline).
pub fn client() -> Arc<Client> {
    static CLIENT: OnceLock<Arc<Client>> = OnceLock::new();
    CLIENT.get_or_init(|| Client::new(options())).clone()
}

/// How the command opens its inputs: local files read with positional
/// reads (a file truncated underneath is an error, not a signal), URLs
/// through the command's [`client`].
pub fn open_options(read: &ReadOptions) -> OpenOptions {
    OpenOptions::default()
        .with_read(read.clone())
        .with_map(false)
        .with_client(client())
}
