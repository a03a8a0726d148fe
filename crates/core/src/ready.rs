//! The ready file: once a process has bound its admin endpoint and every
//! listener, it can write their addresses to a file as JSON, so scripts and
//! tests learn them (port 0 included) without parsing log lines.
//!
//! ```json
//! {"pid":4242,"admin":"127.0.0.1:9901","listeners":{"https":"127.0.0.1:6443"}}
//! ```
//!
//! The file is written atomically (a temporary file in the same directory,
//! then a rename), so a reader that sees it sees all of it.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a process reports once all its sockets are bound.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyReport {
    /// The process id of the writer.
    pub pid: u32,
    /// The admin endpoint's bound address, if the process serves one.
    pub admin: Option<SocketAddr>,
    /// Listener name to bound address. Roles whose listeners have no names
    /// (the agent) use the configured `ip:port` text as the name.
    #[serde(default)]
    pub listeners: BTreeMap<String, SocketAddr>,
}

/// Why a ready file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ReadyFileError {
    /// Creating, writing or renaming the file failed.
    #[error("writing the ready file {path}: {source}")]
    Write {
        /// The ready file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file could not be read (it may not exist yet).
    #[error("reading the ready file {path}: {source}")]
    Read {
        /// The ready file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a ready report.
    #[error("the ready file {path} is not a ready report: {source}")]
    Parse {
        /// The ready file.
        path: PathBuf,
        /// What is wrong with it.
        source: serde_json::Error,
    },
}

impl ReadyReport {
    /// A report for this process, with no addresses yet.
    pub fn for_this_process() -> Self {
        ReadyReport {
            pid: std::process::id(),
            ..ReadyReport::default()
        }
    }

    /// Writes the report to `path` atomically: a temporary file next to it
    /// is written, synced and renamed over `path`.
    pub fn write(&self, path: &Path) -> Result<(), ReadyFileError> {
        let failed = |source| ReadyFileError::Write {
            path: path.to_path_buf(),
            source,
        };
        let json = serde_json::to_vec(self).map_err(|e| failed(std::io::Error::other(e)))?;
        let name = path
            .file_name()
            .ok_or_else(|| failed(std::io::Error::other("the path names no file")))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".{}.tmp", std::process::id()));
        let temp = path.with_file_name(temp_name);
        let written = (|| {
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(&json)?;
            file.write_all(b"\n")?;
            file.sync_all()?;
            std::fs::rename(&temp, path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(failed(e));
        }
        Ok(())
    }

    /// Reads a report written by [`ReadyReport::write`].
    pub fn read(path: &Path) -> Result<Self, ReadyFileError> {
        let text = std::fs::read(path).map_err(|source| ReadyFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_slice(&text).map_err(|source| ReadyFileError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The bound address of the listener called `name`.
    pub fn listener(&self, name: &str) -> Option<SocketAddr> {
        self.listeners.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ready.json");
        let mut report = ReadyReport::for_this_process();
        report.admin = Some("127.0.0.1:9901".parse().expect("addr"));
        report
            .listeners
            .insert("https".into(), "127.0.0.1:6443".parse().expect("addr"));
        report.write(&path).expect("write");
        assert_eq!(ReadyReport::read(&path).expect("read"), report);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("ready.json")]);
        let text = std::fs::read_to_string(&path).expect("text");
        assert!(
            text.contains(r#""listeners":{"https":"127.0.0.1:6443"}"#),
            "{text}"
        );
        assert_eq!(
            report.listener("https"),
            report.listeners.get("https").copied()
        );
    }

    #[test]
    fn a_missing_or_partial_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ready.json");
        assert!(matches!(
            ReadyReport::read(&path),
            Err(ReadyFileError::Read { .. })
        ));
        std::fs::write(&path, b"{\"pid\":").expect("write");
        assert!(matches!(
            ReadyReport::read(&path),
            Err(ReadyFileError::Parse { .. })
        ));
    }
}
