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

    /// A bar for `total` values of work called `what` (values read,
    /// compared or summarized).
    pub fn values(total: u64, what: &str) -> Progress {
        Progress::counted(total, what, "values")
    }

    /// No bar (work too short to show one).
    pub fn hidden() -> Progress {
        Progress(None)
    }

    /// A bar for `total` things called `unit` (files checked, say).
    pub fn counted(total: u64, what: &str, unit: &str) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::new(total);
        let template =
            format!("{{msg}} {{wide_bar}} {{human_pos}}/{{human_len}} {unit} {{per_sec}} {{eta}}");
        let style = ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_string());
        Progress(Some(bar))
    }

    /// Runs `f` (which prints results) with the bar hidden, so that lines
    /// on stdout and the bar on stderr do not garble each other on one
    /// terminal.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.0 {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// Adds `n` done (bytes, values or things; from any thread).
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
