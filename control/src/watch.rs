//! Watched files (the settings file, certificates, later list files): one inotify watcher for
//! the process, and one task per file on the control thread that decides when a file really
//! changed.
//!
//! ```text
//! notify (one thread, every watched directory) ─▶ event names the file? ─▶ that file's task
//! task: event ─▶ DEBOUNCE of quiet ─┐
//!       every POLL (NFS, mounts without inotify) ─┴▶ SHA-256 changed? ─▶ on_change (blocking pool)
//! ```
//! Directories are watched, not files, so a rename into place and a ConfigMap's `..data`
//! symlink swap are seen. Reading and hashing run on the blocking pool, so a slow disk never
//! stalls the control thread.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::files::sha256_of;

/// Quiet period after the last file event before the file is read.
pub const DEBOUNCE: Duration = Duration::from_millis(200);
/// Fallback poll, for file systems without inotify events (NFS, some container mounts).
pub const POLL: Duration = Duration::from_secs(10);

/// Why a file could not be watched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// inotify could not be set up (too many instances, say).
    #[error("cannot start the file watcher: {0}")]
    Start(#[source] notify::Error),
    /// The directory of a watched file could not be watched.
    #[error("cannot watch {}: {source}", dir.display())]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// What notify said.
        source: notify::Error,
    },
}

/// One subscription: events naming `name` in `dir` wake `tx`.
struct Route {
    dir: PathBuf,
    name: OsString,
    tx: mpsc::Sender<()>,
}

/// The process's one inotify watcher; dropping it stops every watch.
pub struct FileWatcher {
    watcher: notify::RecommendedWatcher,
    routes: Arc<Mutex<Vec<Route>>>,
    dirs: HashSet<PathBuf>,
}

impl FileWatcher {
    /// Starts the watcher (one notify thread).
    pub fn new() -> Result<Self, WatchError> {
        let routes: Arc<Mutex<Vec<Route>>> = Arc::default();
        let seen = routes.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            let routes = seen.lock().unwrap_or_else(PoisonError::into_inner);
            for route in routes.iter().filter(|r| relevant(&event, &r.dir, &r.name)) {
                // A full channel already holds a wake-up; one is enough.
                let _ = route.tx.try_send(());
            }
        })
        .map_err(WatchError::Start)?;
        Ok(Self {
            watcher,
            routes,
            dirs: HashSet::new(),
        })
    }

    /// Follows `path`: whenever its content changes from `initial`, `on_change` runs on the
    /// blocking pool. Must be called inside the control thread's runtime; the task ends with it.
    pub fn follow(
        &mut self,
        path: &Path,
        initial: Option<[u8; 32]>,
        on_change: impl Fn() + Send + Sync + 'static,
    ) -> Result<(), WatchError> {
        use notify::Watcher as _;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned();
        if !self.dirs.contains(&dir) {
            self.watcher
                .watch(&dir, notify::RecursiveMode::NonRecursive)
                .map_err(|source| WatchError::Directory {
                    dir: dir.clone(),
                    source,
                })?;
            self.dirs.insert(dir.clone());
        }
        let (tx, rx) = mpsc::channel(1);
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Route {
                dir,
                name: path.file_name().unwrap_or_default().to_owned(),
                tx,
            });
        tokio::spawn(follow(path.to_owned(), rx, initial, Arc::new(on_change)));
        Ok(())
    }
}

/// The task behind [`FileWatcher::follow`].
async fn follow(
    path: PathBuf,
    mut events: mpsc::Receiver<()>,
    initial: Option<[u8; 32]>,
    on_change: Arc<dyn Fn() + Send + Sync>,
) {
    let mut last = initial;
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    poll.tick().await;
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        let quiet = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = events.recv() => match event {
                Some(()) => {
                    due = Some(tokio::time::Instant::now() + DEBOUNCE);
                    continue;
                }
                None => return,
            },
            () = quiet => due = None,
            _ = poll.tick() => {}
        }
        let file = path.clone();
        let Ok(hash) = tokio::task::spawn_blocking(move || sha256_of(&file)).await else {
            continue;
        };
        if Some(hash) != last {
            last = Some(hash);
            let on_change = on_change.clone();
            let _ = tokio::task::spawn_blocking(move || on_change()).await;
        }
    }
}

/// Events that may have changed `name` in `dir`: anything naming it or a ConfigMap's `..data`
/// there, except reads (notify reports opens and read-closes too; the task's own read would
/// re-arm it).
fn relevant(event: &notify::Event, dir: &Path, name: &OsStr) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    if let EventKind::Access(kind) = event.kind
        && kind != AccessKind::Close(AccessMode::Write)
    {
        return false;
    }
    event.paths.iter().any(|p| {
        // notify names a file by the watched directory as it was given, joined with the name.
        let in_dir = p.parent() == Some(dir);
        let file = p.file_name();
        in_dir && (file == Some(name) || file == Some(OsStr::new("..data")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_writes_naming_the_file_or_data_in_its_directory_count() {
        use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};
        let dir = Path::new("/etc/kudurru");
        let name = OsStr::new("settings.toml");
        let event = |kind, path: &str| notify::Event::new(kind).add_path(PathBuf::from(path));
        let write = notify::EventKind::Modify(ModifyKind::Any);
        assert!(relevant(
            &event(write, "/etc/kudurru/settings.toml"),
            dir,
            name
        ));
        assert!(relevant(
            &event(
                notify::EventKind::Create(CreateKind::Any),
                "/etc/kudurru/..data"
            ),
            dir,
            name
        ));
        assert!(!relevant(
            &event(write, "/etc/kudurru/other.toml"),
            dir,
            name
        ));
        assert!(!relevant(
            &event(write, "/etc/other/settings.toml"),
            dir,
            name
        ));
        let read = notify::EventKind::Access(AccessKind::Close(AccessMode::Read));
        assert!(!relevant(
            &event(read, "/etc/kudurru/settings.toml"),
            dir,
            name
        ));
        let closed = notify::EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert!(relevant(
            &event(closed, "/etc/kudurru/settings.toml"),
            dir,
            name
        ));
    }
}
