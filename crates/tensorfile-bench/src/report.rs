//! Markdown output: a table per group and a verdict per target.

use std::fmt::Write as _;

/// A Markdown table, printed when complete.
pub struct Table {
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headings.
    pub fn new(columns: &[&str]) -> Self {
        Table {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are left empty.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as Markdown.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let line = |cells: &[String]| {
            let mut s = String::from("|");
            for i in 0..self.columns.len() {
                let _ = write!(s, " {} |", cells.get(i).map(String::as_str).unwrap_or(""));
            }
            s
        };
        let _ = writeln!(out, "{}", line(&self.columns));
        let rule: Vec<String> = self.columns.iter().map(|_| "---".to_string()).collect();
        let _ = writeln!(out, "{}", line(&rule));
        for row in &self.rows {
            let _ = writeln!(out, "{}", line(row));
        }
        out
    }
}

/// A target and whether it was met.
pub struct Verdict {
    /// What was aimed at, in words.
    pub target: String,
    /// What was measured, in words.
    pub measured: String,
    /// Whether the measurement meets the target.
    pub met: bool,
}

/// Renders the verdicts as a list.
pub fn verdicts(list: &[Verdict]) -> String {
    let mut out = String::new();
    for v in list {
        let mark = if v.met { "met" } else { "NOT met" };
        let _ = writeln!(out, "- {}: {} — {mark}", v.target, v.measured);
    }
    out
}

/// `x` as a ratio with two decimals, e.g. `5.21x`.
pub fn ratio(x: f64) -> String {
    format!("{x:.2}x")
}
