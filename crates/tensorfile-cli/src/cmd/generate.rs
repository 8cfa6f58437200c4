//! `tensorfile generate`: the shell completions and the manual pages,
//! made from the command's own clap definition (so they cannot drift from
//! it). Hidden from `--help`: the release script (scripts/release.sh) runs
//! it to put them in the archive, as ripgrep's `rg --generate` does.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::{Generator, Shell};

use super::Failure;

/// What to generate, and where.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Completions for bash, zsh and fish: DIR/tensorfile.bash,
    /// DIR/_tensorfile and DIR/tensorfile.fish.
    Completions {
        /// The directory to write into (made if missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Manual pages: DIR/tensorfile.1 and one per command
    /// (DIR/tensorfile-inspect.1, ...).
    Man {
        /// The directory to write into (made if missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

impl Args {
    /// The directory, which errors naming no file are reported against.
    pub fn report_to(&self) -> (Option<&Path>, bool) {
        match &self.what {
            What::Completions { dir } | What::Man { dir } => (Some(dir), false),
        }
    }
}

/// Writes the completions or the pages, each file replaced atomically;
/// prints the path of each file written.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    match args.what {
        What::Completions { dir } => {
            std::fs::create_dir_all(&dir)?;
            let mut shown = visible(&crate::Cli::command());
            for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
                let mut text = Vec::new();
                clap_complete::generate(shell, &mut shown, "tensorfile", &mut text);
                write(&dir.join(shell.file_name("tensorfile")), &text)?;
            }
        }
        What::Man { dir } => {
            std::fs::create_dir_all(&dir)?;
            let mut command = crate::Cli::command();
            // Built so that each subcommand has its display name
            // (`tensorfile-inspect`) and its inherited global options.
            command.build();
            // The top page, then a page per visible command (this one is
            // hidden, and so is clap's `help`).
            let pages = std::iter::once(command.clone()).chain(
                command
                    .get_subcommands()
                    .filter(|c| !c.is_hide_set() && c.get_name() != "help")
                    .cloned(),
            );
            for page in pages {
                let man = clap_mangen::Man::new(page);
                let mut text = Vec::new();
                man.render(&mut text)?;
                write(&dir.join(man.get_filename()), &text)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `command` (not yet built) less its hidden subcommands, which
/// clap_complete would offer as completions: its own arguments and the
/// visible subcommands, all that completions are made of.
fn visible(command: &clap::Command) -> clap::Command {
    clap::Command::new("tensorfile")
        .version(env!("CARGO_PKG_VERSION"))
        .args(command.get_arguments().cloned())
        .subcommands(
            command
                .get_subcommands()
                .filter(|c| !c.is_hide_set())
                .cloned(),
        )
}

/// Replaces `path` with `bytes` atomically, and says so on stdout.
fn write(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let file = tensorfile_core::AtomicFile::create(path)?;
    file.write_all_at(bytes, 0)?;
    file.commit(true)?;
    super::out(path.display());
    Ok(())
}
