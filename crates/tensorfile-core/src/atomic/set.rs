//! [`AtomicSet`]: several files that appear together or not at all.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::file::{AtomicFile, Kind, Staged};
use super::temp::Dir;
use crate::{Error, Result};

/// Several [`AtomicFile`]s committed together, in the order they were
/// added: the shards of a set, then its index. Until the commit none of
/// them is visible; dropped without a commit (an error, a panic), nothing
/// of them remains.
///
/// [`AtomicSet::commit`] first syncs every file (if asked) and gives each
/// its hidden temporary name, then renames them over their targets one by
/// one (syncing the directories before the last, so that an index never
/// lands before its shards). If a rename fails, the files this commit had
/// already put in place are removed again and the error
/// ([`Error::Set`]) says which file failed and which committed files remain
/// (those that replaced an older file: the old one cannot be brought back).
///
/// Each file holds an open descriptor until the commit; past a budget
/// drawn from the process's descriptor limit, a finished file is given its
/// hidden name early and closed (a `SIGKILL` then leaves it, for the next
/// save to that directory to sweep).
///
/// ```
/// use tensorfile_core::atomic::AtomicSet;
/// let dir = tempfile::tempdir()?;
/// let mut set = AtomicSet::new();
/// for name in ["a.bin", "b.bin", "index.json"] {
///     let file = set.create(dir.path().join(name))?;
///     file.write_all_at(name.as_bytes(), 0)?;
///     set.add(file)?;
/// }
/// assert_eq!(std::fs::read_dir(dir.path())?.count(), 0); // nothing yet
/// set.commit(false)?;
/// assert_eq!(std::fs::read(dir.path().join("b.bin"))?, b"b.bin");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct AtomicSet {
    members: Vec<Member>,
    /// Directories open for the set's files, each swept once.
    dirs: Vec<Arc<Dir>>,
    /// Members still holding their file open.
    open: usize,
}

#[derive(Debug)]
enum Member {
    Open(AtomicFile),
    Staged(Staged),
}

impl Member {
    fn path(&self) -> &Path {
        match self {
            Member::Open(f) => f.path(),
            Member::Staged(s) => &s.path,
        }
    }
}

impl AtomicSet {
    /// An empty set.
    pub fn new() -> AtomicSet {
        AtomicSet::default()
    }

    /// Creates a file for the set (as [`AtomicFile::create`] does, opening
    /// and sweeping each directory once for the whole set). Write it, then
    /// [`add`](AtomicSet::add) it.
    ///
    /// # Errors
    /// As [`AtomicFile::create`].
    pub fn create(&mut self, path: impl AsRef<Path>) -> Result<AtomicFile> {
        AtomicFile::create_with(path.as_ref(), &mut self.dirs, Kind::Best)
    }

    /// Adds a written file to the set; it is committed after those added
    /// before it.
    ///
    /// # Errors
    /// The file had to be given its hidden name now (see the type's docs),
    /// and that failed.
    pub fn add(&mut self, file: AtomicFile) -> Result<()> {
        if self.open < open_budget() {
            self.open += 1;
            self.members.push(Member::Open(file));
        } else {
            self.members.push(Member::Staged(file.stage(false)?));
        }
        Ok(())
    }

    /// How many files the set holds.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the set holds no file.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The targets, in commit order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> + '_ {
        self.members.iter().map(Member::path)
    }

    /// Puts every file in its target's place, in order; see the type's
    /// docs. With `sync`, files and directories are synced as in
    /// [`AtomicFile::commit`].
    ///
    /// # Errors
    /// [`Error::Set`], naming the file that failed and what remains; or,
    /// once every file is in place, a failure to sync a directory (naming
    /// it).
    pub fn commit(self, sync: bool) -> Result<()> {
        let AtomicSet { members, dirs, .. } = self;
        let failed = |path: &Path, e: Error, kept: Vec<PathBuf>| Error::Set {
            path: path.to_path_buf(),
            source: Box::new(e),
            kept,
        };
        let mut staged = Vec::with_capacity(members.len());
        for member in members {
            let path = member.path().to_path_buf();
            let done = match member {
                Member::Open(file) => file.stage(sync),
                Member::Staged(s) => match sync {
                    true => s.sync().map(|()| s),
                    false => Ok(s),
                },
            };
            // What is staged so far is dropped (removed) on the way out.
            staged.push(done.map_err(|e| failed(&path, e, Vec::new()))?);
        }
        let Some(last) = staged.len().checked_sub(1) else {
            return Ok(());
        };
        // Whether each file published replaced an older one.
        let mut replaced = Vec::with_capacity(staged.len());
        for i in 0..staged.len() {
            if i == last && i > 0 && sync {
                if let Err(e) = sync_dirs(&dirs) {
                    let kept = roll_back(&staged[..i], &replaced);
                    return Err(failed(&staged[i].path, e, kept));
                }
            }
            let s = &mut staged[i];
            let old = s.dir.identity(&s.name).ok().flatten().is_some();
            if let Err(e) = s.publish() {
                let kept = roll_back(&staged[..i], &replaced);
                return Err(failed(&staged[i].path, e, kept));
            }
            replaced.push(old);
        }
        if sync {
            sync_dirs(&dirs)?;
        }
        Ok(())
    }
}

/// Removes the files of `published` again, except those that replaced an
/// older file (`replaced`) or whose name another process has taken since;
/// returns the ones that remain.
fn roll_back(published: &[Staged], replaced: &[bool]) -> Vec<PathBuf> {
    let mut kept = Vec::new();
    for (s, &old) in published.iter().zip(replaced) {
        let ours = s.dir.identity(&s.name).ok().flatten() == Some(s.identity);
        if old || (ours && s.dir.unlink(&s.name).is_err()) {
            kept.push(s.path.clone());
        }
    }
    kept
}

/// Syncs each directory of the set.
fn sync_dirs(dirs: &[Arc<Dir>]) -> Result<()> {
    for dir in dirs {
        dir.sync().map_err(|e| Error::io(&dir.path, e))?;
    }
    Ok(())
}

/// How many files of a set may stay open: an eighth of the descriptor
/// limit, between 4 and 1024.
fn open_budget() -> usize {
    #[cfg(test)]
    if let Some(budget) = TEST_BUDGET.with(std::cell::Cell::get) {
        return budget;
    }
    static BUDGET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        #[cfg(unix)]
        {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit writes the struct it is given.
            if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
                let soft = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
                return (soft / 8).clamp(4, 1024);
            }
        }
        64
    })
}

#[cfg(test)]
thread_local! {
    /// A budget for this thread's sets, in tests.
    pub(crate) static TEST_BUDGET: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}
