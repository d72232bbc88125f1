//! Files the control plane writes and compares: atomic replacement and content hashes, one
//! implementation for tokens, the settings file and (later) storage.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};

/// The SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The SHA-256 of the file at `path`; a file that cannot be read hashes as empty, the same as
/// a missing settings file reads at start.
pub fn sha256_of(path: &Path) -> [u8; 32] {
    sha256(&std::fs::read(path).unwrap_or_default())
}

/// Where a write to `path` lands: `path` itself, or, when it is a symbolic link (a shared
/// settings file, a ConfigMap mount), the file the link points to, so the link stays a link.
pub fn write_target(path: &Path) -> PathBuf {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return path.to_owned();
    }
    std::fs::canonicalize(path).unwrap_or_else(|_| {
        // A dangling link: its target, taken relative to the link's directory.
        match std::fs::read_link(path) {
            Ok(target) if target.is_relative() => {
                path.parent().unwrap_or(Path::new(".")).join(target)
            }
            Ok(target) => target,
            Err(_) => path.to_owned(),
        }
    })
}

/// Creates `dir` and any missing parents with mode 0700 (whatever the umask), for data.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The prefix of the temporary files [`write_atomically`] makes for `name`.
fn temporary_prefix(name: &str) -> String {
    format!(".{name}.tmp-")
}

/// Removes temporary files that a writer of `path` left behind when it was killed mid-write:
/// those whose writing process no longer runs (a live writer's file is left alone). Returns
/// how many were removed.
pub fn remove_stale_temporaries(path: &Path) -> usize {
    let target = write_target(path);
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return 0;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = temporary_prefix(&name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(&prefix) else {
            continue;
        };
        let writer = rest
            .split('-')
            .next()
            .and_then(|pid| pid.parse::<u32>().ok());
        let alive = writer.is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Writes `bytes` to `path` atomically with `mode`: a temporary file in the same directory,
/// fsync, rename, fsync of the directory. Readers see the old file or the new one, never a
/// part; two writers in one process use different temporary files. A symbolic link is written
/// through: its target is replaced, in the target's directory, and the link stays.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let target = write_target(path);
    let path = target.as_path();
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        "{}{}-{}",
        temporary_prefix(&name),
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    ));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_atomic_write_replaces_the_file_with_its_mode_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("kudurru-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("settings.toml");
        std::fs::write(&path, "old").unwrap();
        write_atomically(&path, b"new", 0o640).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert_eq!(sha256_of(&path), sha256(b"new"));
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let missing = dir.join("no-such-dir").join("x");
        assert!(write_atomically(&missing, b"x", 0o600).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlinked_file_is_written_through_and_stays_a_link() {
        let dir = std::env::temp_dir().join(format!("kudurru-files-link-{}", std::process::id()));
        let shared = dir.join("shared");
        create_private_dir(&shared).unwrap();
        let target = shared.join("settings.toml");
        std::fs::write(&target, "old").unwrap();
        let link = dir.join("settings.toml");
        std::os::unix::fs::symlink("shared/settings.toml", &link).unwrap();
        write_atomically(&link, b"new", 0o640).unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        let mode = std::fs::metadata(&shared).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporaries_of_dead_writers_are_removed_and_a_live_writers_kept() {
        let dir = std::env::temp_dir().join(format!("kudurru-files-tmp-{}", std::process::id()));
        create_private_dir(&dir).unwrap();
        let path = dir.join("tokens.json");
        let dead = dir.join(".tokens.json.tmp-4194305-0"); // above the kernel's pid_max limit
        let live = dir.join(format!(".tokens.json.tmp-{}-7", std::process::id()));
        let other = dir.join(".other.json.tmp-4194305-0");
        for file in [&dead, &live, &other] {
            std::fs::write(file, "x").unwrap();
        }
        assert_eq!(remove_stale_temporaries(&path), 1);
        assert!(!dead.exists() && live.exists() && other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
