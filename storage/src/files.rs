//! Data files and their modes: the data directory 0700, database files 0600, and the check
//! the doctor reports when an existing one is wider.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::StorageError;

/// The mode kudurru creates data directories with.
pub const DIRECTORY_MODE: u32 = 0o700;
/// The mode kudurru creates database files with.
pub const FILE_MODE: u32 = 0o600;

/// A data file or directory whose mode lets other users in; a doctor warning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeWarning {
    /// The file or directory.
    pub path: PathBuf,
    /// Its permission bits.
    pub mode: u32,
    /// The mode kudurru creates it with.
    pub expected: u32,
}

impl std::fmt::Display for ModeWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} has mode {:04o}; expected {:04o} (no access for group and others)",
            self.path.display(),
            self.mode,
            self.expected
        )
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StorageError + '_ {
    move |source| StorageError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Creates `directory` (and missing parents) with mode 0700; an existing one is left as is.
pub fn create_data_dir(directory: &Path) -> Result<(), StorageError> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIRECTORY_MODE)
        .create(directory)
        .map_err(io_error(directory))
}

/// Opens `path` for reading and writing, creating it with mode 0600 if it does not exist.
pub(crate) fn open_data_file(path: &Path) -> Result<File, StorageError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)
        .map_err(io_error(path))
}

/// Checks the modes of `directory` and the files directly in it: any group or other
/// permission bit is a warning. A missing directory has nothing to warn about.
pub fn check_modes(directory: &Path) -> Result<Vec<ModeWarning>, StorageError> {
    let mut warnings = Vec::new();
    let metadata = match fs::metadata(directory) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(warnings),
        Err(error) => return Err(io_error(directory)(error)),
    };
    let mut check = |path: &Path, mode: u32, expected: u32| {
        let mode = mode & 0o7777;
        if mode & 0o077 != 0 {
            warnings.push(ModeWarning {
                path: path.to_owned(),
                mode,
                expected,
            });
        }
    };
    check(directory, metadata.permissions().mode(), DIRECTORY_MODE);
    let entries = fs::read_dir(directory).map_err(io_error(directory))?;
    for entry in entries {
        let entry = entry.map_err(io_error(directory))?;
        let path = entry.path();
        let metadata = entry.metadata().map_err(io_error(&path))?;
        if metadata.is_file() {
            check(&path, metadata.permissions().mode(), FILE_MODE);
        }
    }
    Ok(warnings)
}
