//! One host per SQLite file: the host holds an exclusive `flock` on `<file>-lock` for as long as
//! it has the store open, with its pid written in the file. The OS drops the lock when the
//! process ends however it ends (`kill -9` included), so a lock is never left behind; a second
//! host is refused at once, and the error names the one that holds it. Readers (`wfhost list`,
//! `status`, ...) take no lock: they only look whether one is held.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{StoreError, StoreErrorKind, StoreResult};

/// The lock a host holds on a SQLite store; released when dropped (or when the process ends).
#[derive(Debug)]
pub(crate) struct HostLock {
    /// Held open: the lock lives as long as this file description.
    _file: File,
}

/// Who holds a store's lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its process id, if it had written it when asked.
    pub pid: Option<u32>,
    /// What it runs (`wfhost serve`, or an application's name), if known.
    pub command: Option<String>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.pid, &self.command) {
            (Some(pid), Some(command)) => write!(f, "pid {pid}: {command}"),
            (Some(pid), None) => write!(f, "pid {pid}"),
            _ => f.write_str("a process that is starting"),
        }
    }
}

/// The lock file of the store at `db`: beside the file itself, wherever the path given leads
/// (a link to the store, or another path to it, must find the same lock).
pub(crate) fn lock_path(db: &Path) -> PathBuf {
    let mut path = resolved(db).into_os_string();
    path.push("-lock");
    PathBuf::from(path)
}

/// `path` with its links and `.` resolved (its directory's, if it is not there yet). Resolving
/// opens no file.
pub(crate) fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| {
        // Not there yet: its directory, resolved, and its name.
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = dir.map_or_else(|| std::fs::canonicalize("."), std::fs::canonicalize);
        match (dir, path.file_name()) {
            (Ok(dir), Some(name)) => dir.join(name),
            _ => path.to_path_buf(),
        }
    })
}

/// How long a host keeps trying for a lock held by someone else: a reader that is looking
/// holds it (shared) for a moment; a host holds it for good.
const PATIENCE: Duration = Duration::from_millis(200);

impl HostLock {
    /// Takes the lock of the store at `db` for this process, or says who holds it.
    pub(crate) fn acquire(db: &Path) -> StoreResult<HostLock> {
        let path = lock_path(db);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| {
                StoreError::new(
                    StoreErrorKind::Unavailable,
                    format_args!(
                        "could not open the lock file {} of the store {}: {e} (the host needs to \
                     write beside the store's file)",
                        path.display(),
                        db.display()
                    ),
                )
            })?;
        let started = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if started.elapsed() < PATIENCE => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TryLockError::WouldBlock) => {
                    // A reader holds it only for a moment: a host holds it still. It writes its
                    // pid just after it takes the lock.
                    let mut holder = read_holder(&mut file);
                    while holder.pid.is_none() && started.elapsed() < PATIENCE * 10 {
                        std::thread::sleep(Duration::from_millis(5));
                        holder = read_holder(&mut file);
                    }
                    return Err(held(db, &holder));
                }
                Err(TryLockError::Error(e)) => {
                    return Err(StoreError::new(
                        StoreErrorKind::Unavailable,
                        format_args!(
                            "could not lock the store {} ({}: {e}): is its file system one that \
                         supports locks?",
                            db.display(),
                            path.display()
                        ),
                    ))
                }
            }
        }
        let me = format!("{} {}\n", std::process::id(), command_name());
        let written = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(me.as_bytes()))
            .and_then(|()| file.flush());
        if let Err(e) = written {
            // The lock holds without the note; others are told less about who holds it.
            tracing::warn!(
                "could not write this host's pid into {}: {e}",
                path.display()
            );
        }
        Ok(HostLock { _file: file })
    }
}

/// Who holds the lock of the store at `db`, if a host does (looked at without waiting).
pub fn holder(db: &Path) -> Option<Holder> {
    let mut file = File::open(lock_path(db)).ok()?;
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            None
        }
        Err(TryLockError::WouldBlock) => Some(read_holder(&mut file)),
        Err(TryLockError::Error(_)) => None,
    }
}

/// The pid and command the holder wrote.
fn read_holder(file: &mut File) -> Holder {
    let mut text = String::new();
    let _ = file.rewind().and_then(|()| file.read_to_string(&mut text));
    let mut words = text.trim().splitn(2, ' ');
    let pid = words.next().and_then(|pid| pid.parse().ok());
    let command = words.next().map(str::to_string).filter(|c| !c.is_empty());
    Holder { pid, command }
}

/// The error for a store that another host holds.
fn held(db: &Path, holder: &Holder) -> StoreError {
    StoreError::new(
        StoreErrorKind::Held,
        format_args!(
        "the store {db} is held by another host ({holder}), and a SQLite store has one host at a \
         time: stop that host first (what it runs stays in the store and goes on with the next \
         host), or let it run the work; beside it, `wfhost list`, `status`, `result`, `history` \
         and `replay` read the store. To start, message and cancel workflows while hosts run, \
         serve a PostgreSQL store (`wfhost serve --store postgres://...`) and use `wfhost \
         start`, `send` and `cancel`",
        db = db.display()
    ),
    )
}

/// This program and its subcommand (`wfhost serve`), without its arguments: they may hold
/// secrets, and the lock file is readable by others.
fn command_name() -> String {
    let mut args = std::env::args_os();
    let program = args
        .next()
        .map(|p| {
            Path::new(&p).file_name().map_or_else(
                || p.to_string_lossy().into_owned(),
                |n| n.to_string_lossy().into_owned(),
            )
        })
        .unwrap_or_else(|| "a host".into());
    match args.next().map(|a| a.to_string_lossy().into_owned()) {
        Some(sub) if sub.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !sub.is_empty() => {
            format!("{program} {sub}")
        }
        _ => program,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_host_is_refused_and_told_who_holds_the_store() {
        let dir = std::env::temp_dir().join(format!("wfhost-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("held.db");
        assert_eq!(holder(&db), None);
        let first = HostLock::acquire(&db).unwrap();
        let seen = holder(&db).expect("held");
        assert_eq!(seen.pid, Some(std::process::id()));
        let refused = HostLock::acquire(&db).unwrap_err().to_string();
        assert!(
            refused.contains(&format!("held by another host (pid {}", std::process::id())),
            "{refused}"
        );
        drop(first);
        assert_eq!(holder(&db), None);
        let again = HostLock::acquire(&db).unwrap();
        // Another path to the same file finds the same lock.
        std::fs::write(&db, b"").unwrap();
        let link = dir.join("link.db");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&db, &link).unwrap();
        let through_link = HostLock::acquire(&link).unwrap_err().to_string();
        assert!(
            through_link.contains("held by another host"),
            "{through_link}"
        );
        let dotted = dir.join(".").join("held.db");
        assert!(HostLock::acquire(&dotted).is_err());
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
