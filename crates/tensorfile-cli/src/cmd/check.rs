//! `tensorfile check [--json] [--contract v0] DIR`: verify a model directory
//! (the files, and every tensor against the architecture config.json
//! names: a course `tl_arch` or a Hugging Face class).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tensorfile::model::check_dir;
use tensorfile::Contract;

use super::{out, Failure};

/// Arguments of `check`.
#[derive(clap::Args)]
pub struct Args {
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Also hold the tensors to a course contract (`v0`: F32 only).
    #[arg(long, value_name = "CONTRACT", value_parser = parse_contract)]
    contract: Option<Contract>,
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

fn parse_contract(s: &str) -> Result<Contract, String> {
    match s {
        "v0" => Ok(Contract::V0),
        _ => Err(format!("`{s}` is not a contract; expected v0")),
    }
}

/// Checks one directory; exit 1 when it has any error (warnings do not count).
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    if !args.dir.is_dir() {
        return Err(format!("{}: not a directory", args.dir.display()).into());
    }
    let contract = args.contract.unwrap_or(Contract::Any);
    let report = check_dir(&args.dir, contract);
    let errors = report.errors().count() + report.unlisted_errors;
    let warnings = report.warnings().count() + report.unlisted_warnings;
    if args.json {
        out(json!({
            "dir": args.dir,
            "ok": report.is_ok(),
            "contract": args.contract.map(|c| c.to_string()),
            "errors": errors,
            "warnings": warnings,
            "report": report,
        }));
    } else {
        let dir = args.dir.display();
        let arch = match (&report.arch, report.architecture_checked) {
            (Some(arch), true) => format!("{arch}, architecture checked"),
            (Some(arch), false) => format!("{arch}, architecture not checked"),
            (None, _) => "architecture unknown".to_string(),
        };
        let verdict = if report.is_ok() { "ok" } else { "failed" };
        out(format_args!(
            "{dir}: {verdict} ({arch}; {errors} errors, {warnings} warnings)"
        ));
        for problem in &report.problems {
            out(format_args!("{dir}: {problem}"));
        }
        if report.unlisted_errors + report.unlisted_warnings > 0 {
            out(format_args!(
                "{dir}: ... and {} more problems not listed",
                report.unlisted_errors + report.unlisted_warnings
            ));
        }
        for note in &report.notes {
            out(format_args!("{dir}: note: {note}"));
        }
    }
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
