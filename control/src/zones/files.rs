//! Zone files on disk: read only inside `zones.fileDir` (symlinks resolved, so a link out of
//! it is refused like `..`), with a byte bound, and fingerprinted so the manager sees a change
//! by polling.
//!
//! ```text
//! Zone.spec.file ─▶ confine(fileDir) ─▶ read (≤ max bytes) ─▶ parse_zone_file ─▶ ZoneData
//!                                        $INCLUDE ─▶ confine ─▶ read ─┘   + every file read,
//!                                                                          fingerprinted
//! ```

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use kudurru_core::zone::file::{Included, Limits, parse_zone_file};
use kudurru_core::zone::{ZoneData, ZoneError, ZoneErrorKind};

/// What identifies a file's version without reading it: its modification time and length.
pub type Fingerprint = Option<(SystemTime, u64)>;

/// A parsed zone file and the files it read (the file first, then its includes).
#[derive(Debug)]
pub struct Loaded {
    /// The records.
    pub data: ZoneData,
    /// Every file read and its fingerprint when read.
    pub files: Vec<(PathBuf, Fingerprint)>,
}

/// The fingerprint of `path` now (`None` when it cannot be read).
pub fn fingerprint(path: &Path) -> Fingerprint {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Whether any of `files` changed since it was read.
pub fn changed(files: &[(PathBuf, Fingerprint)]) -> bool {
    files.iter().any(|(path, seen)| fingerprint(path) != *seen)
}

/// Reads and parses `file` (relative to `dir`) for the zone at `apex`. Blocking: run it on the
/// blocking pool. The files read are returned even when parsing fails, so a fix is noticed.
pub fn load(
    dir: &Path,
    file: &Path,
    apex: &[u8],
    limits: &Limits,
) -> (Result<ZoneData, ZoneError>, Vec<(PathBuf, Fingerprint)>) {
    let mut files = Vec::new();
    let name = file.display().to_string();
    let text = match confine(dir, file).and_then(|path| {
        files.push((path.clone(), fingerprint(&path)));
        read(&path, limits.max_bytes)
    }) {
        Ok(text) => text,
        Err(why) => {
            // Followed even when missing: creating it later is noticed.
            if files.is_empty() {
                let path = dir.join(file);
                files.push((path.clone(), fingerprint(&path)));
            }
            return (
                Err(ZoneError {
                    origin: Some(name),
                    kind: ZoneErrorKind::Syntax(why),
                }),
                files,
            );
        }
    };
    let mut include = |written: &str| -> Result<Included, String> {
        let path = confine(dir, Path::new(written))?;
        files.push((path.clone(), fingerprint(&path)));
        let text = read(&path, limits.max_bytes)?;
        let name = path
            .strip_prefix(dir.canonicalize().unwrap_or_else(|_| dir.to_owned()))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| written.to_owned());
        Ok(Included { name, text })
    };
    let result = parse_zone_file(&name, &text, apex, limits, &mut include);
    (result, files)
}

/// `file` (relative to `dir`, or absolute) resolved with symlinks, if it is inside `dir`.
fn confine(dir: &Path, file: &Path) -> Result<PathBuf, String> {
    if file.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err("`..` is not allowed: the file must be inside zones.fileDir".into());
    }
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("zones.fileDir {}: {e}", dir.display()))?;
    let path = dir.join(file);
    let resolved = path
        .canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !resolved.starts_with(&dir) {
        return Err(format!(
            "{} is outside zones.fileDir ({})",
            resolved.display(),
            dir.display()
        ));
    }
    Ok(resolved)
}

/// The file's bytes, at most `max` of them.
fn read(path: &Path, max: usize) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    file.take(limit)
        .read_to_end(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() > max {
        return Err(format!("{}: larger than {max} bytes", path.display()));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apex() -> Vec<u8> {
        kudurru_core::policy::name::to_wire("corp.example.").unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kudurru-zone-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("zones/inc")).unwrap();
        dir
    }

    #[test]
    fn includes_inside_the_directory_load_and_outside_ones_are_refused() {
        let root = scratch("confine");
        let dir = root.join("zones");
        std::fs::write(root.join("secret.zone"), "leak 60 IN A 192.0.2.66\n").unwrap();
        std::fs::write(dir.join("inc/hosts.zone"), "\nhost 60 IN A 192.0.2.1\n").unwrap();
        std::fs::write(
            dir.join("good.zone"),
            "@ 60 IN A 192.0.2.9\n$INCLUDE inc/hosts.zone\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(root.join("secret.zone"), dir.join("link.zone")).unwrap();
        let limits = Limits::default();
        let (data, files) = load(&dir, Path::new("good.zone"), &apex(), &limits);
        let data = data.unwrap();
        assert_eq!(data.origins, ["good.zone:1", "inc/hosts.zone:2"]);
        assert_eq!(files.len(), 2);
        assert!(!changed(&files));

        for (text, why) in [
            ("$INCLUDE ../secret.zone\n", "`..`"),
            ("$INCLUDE link.zone\n", "outside zones.fileDir"),
            ("$INCLUDE missing.zone\n", "missing.zone"),
        ] {
            std::fs::write(dir.join("bad.zone"), format!("@ 60 IN A 192.0.2.9\n{text}")).unwrap();
            let error = load(&dir, Path::new("bad.zone"), &apex(), &limits)
                .0
                .unwrap_err();
            assert_eq!(error.origin.as_deref(), Some("bad.zone:2"), "{text}");
            assert!(
                matches!(&error.kind, ZoneErrorKind::Include(m) if m.contains(why)),
                "{text}: {error}"
            );
        }
        let error = load(&dir, Path::new("link.zone"), &apex(), &limits)
            .0
            .unwrap_err();
        assert!(
            error.to_string().contains("outside zones.fileDir"),
            "{error}"
        );
        let (missing, files) = load(&dir, Path::new("none.zone"), &apex(), &limits);
        assert!(missing.is_err());
        assert_eq!(files.len(), 1, "a missing file is followed");

        std::fs::write(
            dir.join("inc/hosts.zone"),
            "host 60 IN A 192.0.2.2\nmore 60 IN A 192.0.2.3\n",
        )
        .unwrap();
        let (_, files_before) = load(&dir, Path::new("good.zone"), &apex(), &limits);
        std::fs::write(dir.join("inc/hosts.zone"), "host 60 IN A 192.0.2.2\n").unwrap();
        assert!(changed(&files_before), "an included file's change is seen");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_file_over_the_byte_limit_is_refused() {
        let root = scratch("limit");
        let dir = root.join("zones");
        std::fs::write(dir.join("big.zone"), "a 60 IN A 192.0.2.1\n".repeat(10)).unwrap();
        let limits = Limits {
            max_bytes: 50,
            ..Limits::default()
        };
        let error = load(&dir, Path::new("big.zone"), &apex(), &limits)
            .0
            .unwrap_err();
        assert!(
            error.to_string().contains("larger than 50 bytes"),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
