//! The ready file: how a started role tells scripts and tests where it
//! listens, in JSON, once every listener and the admin endpoint are bound.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// What a role reports once it is bound.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyReport {
    /// The process id.
    pub pid: u32,
    /// The role (`gateway`, `agent`).
    pub role: String,
    /// The admin endpoint's bound address.
    pub admin: Option<SocketAddr>,
    /// Each listener's name and bound address.
    pub listeners: BTreeMap<String, SocketAddr>,
}

impl ReadyReport {
    /// Writes the report to `path` atomically: readers see the whole file
    /// or none (written beside it, then renamed).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        serde_json::to_writer_pretty(&mut tmp, self)?;
        tmp.write_all(b"\n")?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }

    /// Reads a report written by [`ReadyReport::write`].
    pub fn read(path: &Path) -> std::io::Result<ReadyReport> {
        let text = std::fs::read(path)?;
        serde_json::from_slice(&text)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ready.json");
        let report = ReadyReport {
            pid: 42,
            role: "gateway".into(),
            admin: Some("127.0.0.1:9901".parse().unwrap()),
            listeners: [("public".to_owned(), "[::1]:8443".parse().unwrap())]
                .into_iter()
                .collect(),
        };
        report.write(&path).unwrap();
        assert_eq!(ReadyReport::read(&path).unwrap(), report);
    }
}
