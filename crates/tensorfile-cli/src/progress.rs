//! A progress bar on stderr, shown only when stderr is a terminal: the
//! command's one implementation of the library's [`Progress`] trait.

use std::io::IsTerminal;
use std::sync::OnceLock;

use indicatif::{ProgressBar, ProgressStyle};
use tensorfile::Progress;

/// A bar, shown only when stderr is a terminal (pipes, files and tests see
/// nothing), cleared when dropped. It fits the terminal's width (the bar
/// takes what the figures leave), so it never wraps. Passed as a
/// `&dyn Progress` to the library's operations, it counts what they do.
pub struct Bar {
    /// The bar, once its total is known and when stderr is a terminal.
    bar: OnceLock<ProgressBar>,
    /// The template and message of a bar made when its total is told
    /// ([`Bar::bytes_when_told`]); `None` for a bar made at once or hidden.
    later: Option<(String, String)>,
    /// Prints a note ([`Progress::note`]) with the bar hidden; notes are
    /// dropped without one (the library's writes, hashes and summaries
    /// never note).
    warn: Option<fn(&str)>,
}

/// Figures of a byte-counting bar.
const BYTES: &str =
    "{msg} {wide_bar} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}";

impl Bar {
    /// A bar for bytes of work called `what`, shown once the work tells
    /// its total ([`Progress::total`]; a fetch, after asking the server);
    /// its notes are printed by `warn`.
    pub fn bytes_when_told(what: &str, warn: fn(&str)) -> Bar {
        Bar {
            bar: OnceLock::new(),
            later: Some((BYTES.to_string(), what.to_string())),
            warn: Some(warn),
        }
    }

    /// A bar for values of work called `what`, shown once the work tells
    /// its total ([`Progress::total`]): an operation that counts what it
    /// will read before reading it.
    pub fn values_when_told(what: &str) -> Bar {
        Bar {
            bar: OnceLock::new(),
            later: Some((counted_template("values"), what.to_string())),
            warn: None,
        }
    }

    /// No bar (work too short to show one).
    pub fn hidden() -> Bar {
        Bar {
            bar: OnceLock::new(),
            later: None,
            warn: None,
        }
    }

    /// A bar for `total` things called `unit` (files checked, say).
    pub fn counted(total: u64, what: &str, unit: &str) -> Bar {
        Bar::shown(total, &counted_template(unit), what)
    }

    /// A bar for `total` made now, when stderr is a terminal.
    fn shown(total: u64, template: &str, what: &str) -> Bar {
        let bar = Bar::hidden();
        if let Some(made) = make(total, template, what) {
            let _ = bar.bar.set(made);
        }
        bar
    }

    /// Runs `f` (which prints results) with the bar hidden, so that lines
    /// on stdout and the bar on stderr do not garble each other on one
    /// terminal.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.bar.get() {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// Adds `n` done (bytes, values or things; from any thread).
    pub fn inc(&self, n: u64) {
        if let Some(bar) = self.bar.get() {
            bar.inc(n);
        }
    }
}

/// The figures of a bar counting things called `unit`: its rate is
/// `{rate}` ([`rate`]), not indicatif's `{per_sec}` (four decimals).
fn counted_template(unit: &str) -> String {
    format!("{{msg}} {{wide_bar}} {{human_pos}}/{{human_len}} {unit} {{rate}} {{eta}}")
}

/// A rate of things per second as a bar shows it: a few digits
/// (`12.3/s`, `1.2M/s`).
fn rate(per_sec: f64) -> String {
    let per_sec = if per_sec.is_finite() { per_sec } else { 0.0 };
    format!("{}/s", crate::cmd::words::short(per_sec))
}

/// A bar styled by `template` with the message `what`, or `None` when
/// stderr is not a terminal.
fn make(total: u64, template: &str, what: &str) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(total);
    bar.set_style(style(template));
    bar.set_message(what.to_string());
    Some(bar)
}

/// The bars' style, with the figures of `template`.
fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key(
            "rate",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&rate(state.per_sec()));
            },
        )
        .progress_chars("=> ")
}

impl Progress for Bar {
    /// Makes a bar waiting for its total ([`Bar::bytes_when_told`]); the
    /// first total told is kept, as is the total of a bar made at once.
    fn total(&self, units: u64) {
        if let Some((template, what)) = &self.later {
            if self.bar.get().is_none() {
                if let Some(made) = make(units, template, what) {
                    let _ = self.bar.set(made);
                }
            }
        }
    }

    fn advance(&self, units: u64) {
        self.inc(units);
    }

    fn note(&self, message: &str) {
        if let Some(warn) = self.warn {
            self.suspend(|| warn(message));
        }
    }

    /// The bar starts over, counting this stage's bytes: one made already
    /// (or shown once its total is told) is restyled; a hidden one stays
    /// hidden. `what` may hold a URL as given: escaped for the terminal.
    fn stage(&self, what: &str, total: u64) {
        let what = &crate::cmd::escape_text(what);
        let bar = match (self.bar.get(), &self.later) {
            (Some(bar), _) => bar,
            (None, Some(_)) => match make(total, BYTES, what) {
                Some(made) => self.bar.get_or_init(|| made),
                None => return,
            },
            (None, None) => return,
        };
        bar.set_style(style(BYTES));
        bar.set_length(total);
        bar.set_message(what.to_string());
        bar.reset();
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.get() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The notes `keep` was given (a `fn` pointer cannot capture).
    static KEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());

    fn keep(message: &str) {
        KEPT.lock().unwrap().push(message.to_string());
    }

    #[test]
    fn rates_are_rounded() {
        assert_eq!(rate(1234.5678), "1.2K/s");
        assert_eq!(rate(12.3456), "12.3/s");
        assert_eq!(rate(0.0), "0/s");
        assert_eq!(rate(f64::INFINITY), "0/s");
        assert!(counted_template("values").contains("{rate}"));
    }

    #[test]
    fn a_bar_told_its_total_later_passes_notes_on_before_and_after() {
        let bar = Bar::bytes_when_told("fetching", keep);
        let progress: &dyn Progress = &bar;
        progress.note("before");
        progress.total(10);
        progress.advance(4);
        progress.note("after");
        drop(bar);
        // Bars made at once have no printer: their notes are dropped.
        Bar::counted(10, "writing", "files").note("dropped");
        Bar::hidden().note("dropped");
        assert_eq!(*KEPT.lock().unwrap(), ["before", "after"]);
    }
}
