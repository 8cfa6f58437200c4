//! What a save's path leads to: the file to create or replace (following
//! a symbolic link), the mode the new file gets, and whether the path is
//! one of the inputs.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::OutputError;
use crate::{Error, Result};

/// Where a save puts its file.
#[derive(Debug)]
pub(crate) struct Target {
    /// The directory holding the file (a symbolic link's target's).
    pub(crate) dir: PathBuf,
    /// The file's name in it.
    pub(crate) name: OsString,
    /// The permission bits of the file replaced, if one is: the new file
    /// gets them (never setuid, setgid or sticky).
    pub(crate) mode: Option<u32>,
}

/// Resolves `path` for a save: a new file, a regular file to replace, or a
/// symbolic link to a regular file, which is followed (the file it leads
/// to is replaced, in its own directory; the link stays). A directory, a
/// link to one, a dangling link and anything but a regular file are
/// refused.
pub(crate) fn resolve(path: &Path) -> Result<Target> {
    let Some(file_name) = path.file_name() else {
        return Err(Error::io(
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "not a file name"),
        ));
    };
    let refuse = |problem| Error::Output {
        path: path.to_path_buf(),
        problem,
    };
    let here = |p: &Path| match p.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Target {
                dir: here(path),
                name: file_name.to_os_string(),
                mode: None,
            })
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let (real, meta) = if meta.file_type().is_symlink() {
        let real = fs::canonicalize(path).map_err(|e| {
            refuse(OutputError::DanglingLink {
                problem: e.to_string(),
            })
        })?;
        let meta = fs::metadata(&real).map_err(|e| Error::io(path, e))?;
        if meta.is_dir() {
            return Err(refuse(OutputError::LinkToDirectory { target: real }));
        }
        (real, meta)
    } else {
        if meta.is_dir() {
            return Err(refuse(OutputError::Directory));
        }
        (path.to_path_buf(), meta)
    };
    if !meta.is_file() {
        return Err(refuse(OutputError::NotRegular));
    }
    let name = real.file_name().unwrap_or(file_name).to_os_string();
    Ok(Target {
        dir: here(&real),
        name,
        mode: Some(permission_bits(&meta)),
    })
}

#[cfg(unix)]
pub(crate) fn permission_bits(meta: &fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o777
}

#[cfg(not(unix))]
pub(crate) fn permission_bits(meta: &fs::Metadata) -> u32 {
    if meta.permissions().readonly() {
        0o444
    } else {
        0o666
    }
}

/// Gives a new temporary file the replaced file's permission bits.
#[cfg(unix)]
pub(crate) fn set_mode(file: &fs::File, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
pub(crate) fn set_mode(file: &fs::File, mode: u32) -> io::Result<()> {
    let mut permissions = file.metadata()?.permissions();
    permissions.set_readonly(mode & 0o222 == 0);
    file.set_permissions(permissions)
}

/// Refuses to write `output` when it is one of `inputs`: the same file
/// (same device and inode, whatever the names: hard links and symbolic
/// links included), not merely the same name. An output that does not
/// exist yet, or an input that cannot be looked at, passes.
///
/// A save never changes the file its readers hold open (the new file is a
/// new inode), so reading and writing one file works; what this prevents is
/// losing the input, say a checkpoint replaced by its conversion under its
/// own name, or a shard of a set replaced by the merged set.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let input = dir.path().join("in.pt");
/// std::fs::write(&input, b"checkpoint")?;
/// let err = tensorfile_core::atomic::check_not_input(&input, [&input]).unwrap_err();
/// assert!(matches!(err, tensorfile_core::Error::Output { .. }));
/// tensorfile_core::atomic::check_not_input(dir.path().join("out.safetensors"), [&input])?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`Error::Output`] with [`OutputError::IsInput`], naming `output` and the
/// input it is.
pub fn check_not_input<P: AsRef<Path>>(
    output: impl AsRef<Path>,
    inputs: impl IntoIterator<Item = P>,
) -> Result<()> {
    let output = output.as_ref();
    let Some(out) = identity(output) else {
        return Ok(());
    };
    for input in inputs {
        let input = input.as_ref();
        if identity(input).is_some_and(|id| id == out) {
            return Err(Error::Output {
                path: output.to_path_buf(),
                problem: OutputError::IsInput {
                    input: input.to_path_buf(),
                },
            });
        }
    }
    Ok(())
}

/// A file's identity, following symbolic links.
#[cfg(unix)]
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn identity(path: &Path) -> Option<PathBuf> {
    fs::canonicalize(path).ok()
}
