//! `tensorfile check [--json] [--contract v0] DIR`: verify a model directory
//! (the files, and every tensor against the architecture config.json
//! names: a course `tl_arch` or a Hugging Face class).

use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile_ops::check::{check, CheckRequest};

use super::words::plural;
use super::{out, Failure};

/// Arguments of `check`.
#[derive(clap::Args)]
pub struct Args {
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Also hold the tensors to a course contract (`v0`: F32 only).
    #[arg(long, value_name = "CONTRACT", value_parser = parse_contract)]
    contract: Option<String>,
    /// The model directory (config.json and its weights): a course model,
    /// a transformers, mlx-lm or diffusers directory.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        (Some(&self.dir), self.json)
    }
}

/// A contract's name, checked by the library's one list.
fn parse_contract(s: &str) -> Result<String, String> {
    tensorfile_ops::check::contract(s).map(|_| s.to_string())
}

/// Checks one directory; exit 1 when it has any error (warnings do not count).
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let mut request = CheckRequest::new(&args.dir);
    request.contract = args.contract.clone();
    let report = check(&request, &())?;
    let (errors, warnings) = (report.errors, report.warnings);
    if args.json {
        out(serde_json::to_string(&report).map_err(|e| e.to_string())?);
    } else {
        let dir = args.dir.display();
        let checked = &report.report;
        let arch = match (&checked.arch, checked.architecture_checked) {
            (Some(arch), true) => format!("{arch}, architecture checked"),
            (Some(arch), false) => format!("{arch}, architecture not checked"),
            (None, _) => "architecture unknown".to_string(),
        };
        let verdict = if report.ok { "ok" } else { "failed" };
        out(format_args!(
            "{dir}: {verdict} ({arch}; {}, {})",
            plural(errors as u64, "error"),
            plural(warnings as u64, "warning")
        ));
        for problem in &checked.problems {
            out(format_args!("{dir}: {problem}"));
        }
        if checked.unlisted_errors + checked.unlisted_warnings > 0 {
            out(format_args!(
                "{dir}: ... and {} more not listed",
                plural(
                    (checked.unlisted_errors + checked.unlisted_warnings) as u64,
                    "problem"
                )
            ));
        }
        for note in &checked.notes {
            out(format_args!("{dir}: note: {note}"));
        }
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
