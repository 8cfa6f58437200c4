//! A progress bar on stderr, shown only when stderr is a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A byte-counting bar, shown only when stderr is a terminal (pipes, files
/// and tests see nothing), cleared when dropped. It fits the terminal's
/// width (the bar takes what the figures leave), so it never wraps.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar for `total` bytes of work called `what`.
    pub fn bytes(total: u64, what: &str) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::new(total);
        let style = ProgressStyle::with_template(
            "{msg} {wide_bar} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_string());
        Progress(Some(bar))
    }

    /// Adds `n` bytes done (from any thread).
    pub fn inc(&self, n: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(n);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
