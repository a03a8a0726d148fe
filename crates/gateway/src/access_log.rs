//! The optional access log: one line per relayed connection, when it
//! ends (listener, client, what routed it, route, backend, bytes each way,
//! duration, how it ended), as text or JSON, to stdout or a file.
//!
//! Lines go through a bounded queue to a writer thread, so a slow disk or
//! pipe never holds up a connection: when the queue is full a line is
//! dropped and counted (`apiway_access_log_dropped_total`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use apiway_core::relay::{RelayEnd, RelayOutcome};
use prometheus_client::metrics::counter::Counter;
use serde::Deserialize;
use tokio::sync::mpsc;

/// `access_log:` in the configuration file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessLogConfig {
    /// A file (appended to; reopened when a reload changes this section)
    /// or `-` for standard output.
    pub path: PathBuf,
    /// `text` (key=value) or `json` (one object per line).
    #[serde(default)]
    pub format: AccessLogFormat,
}

/// How access log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessLogFormat {
    /// `time=... listener=... peer=...`, one connection per line.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Lines waiting for the writer at most; more are dropped and counted.
const QUEUE: usize = 8192;

/// A running access log: the queue to its writer thread.
pub(crate) struct AccessLog {
    config: AccessLogConfig,
    tx: mpsc::Sender<String>,
    dropped: Counter,
}

/// What a connection carries from its start to its access log line (only
/// when the log is on).
pub(crate) struct Pending {
    start: SystemTime,
    started: Instant,
    /// What routed the connection: the SNI, the original destination or
    /// the CONNECT authority.
    matched: Option<String>,
    backend: String,
    /// Client bytes sent to the backend before the relay (the replayed
    /// ClientHello or what followed a header), which the relay's count
    /// does not include.
    replayed: u64,
}

impl Pending {
    /// Starts timing a connection to `backend` routed by `matched`.
    pub(crate) fn new(matched: Option<String>, backend: String, replayed: usize) -> Box<Pending> {
        Box::new(Pending {
            start: SystemTime::now(),
            started: Instant::now(),
            matched,
            backend,
            replayed: replayed as u64,
        })
    }
}

impl AccessLog {
    /// Opens the destination and starts the writer thread.
    pub(crate) fn open(config: &AccessLogConfig, dropped: Counter) -> Result<AccessLog, String> {
        let sink: Box<dyn Write + Send> = if config.path.as_os_str() == "-" {
            Box::new(std::io::stdout())
        } else {
            Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&config.path)
                    .map_err(|e| format!("access_log.path {}: {e}", config.path.display()))?,
            )
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_lines(rx, sink))
            .map_err(|e| format!("access_log: starting the writer: {e}"))?;
        Ok(AccessLog {
            config: config.clone(),
            tx,
            dropped,
        })
    }

    /// The configuration it was opened with.
    pub(crate) fn config(&self) -> &AccessLogConfig {
        &self.config
    }

    /// Queues the line of a connection that ended with `outcome`.
    pub(crate) fn record(
        &self,
        listener: &str,
        peer: SocketAddr,
        route: &str,
        pending: &Pending,
        outcome: &RelayOutcome,
    ) {
        let line = format_line(
            self.config.format,
            &Line {
                time: humantime::format_rfc3339_millis(pending.start).to_string(),
                listener,
                peer,
                matched: pending.matched.as_deref(),
                route,
                backend: &pending.backend,
                to_backend: pending.replayed + outcome.client_to_backend,
                outcome,
                duration: pending.started.elapsed(),
            },
        );
        if self.tx.try_send(line).is_err() {
            self.dropped.inc();
        }
    }
}

/// The fields of one line.
struct Line<'a> {
    time: String,
    listener: &'a str,
    peer: SocketAddr,
    matched: Option<&'a str>,
    route: &'a str,
    backend: &'a str,
    /// Client bytes that reached the backend, the replayed ones included.
    to_backend: u64,
    outcome: &'a RelayOutcome,
    duration: Duration,
}

/// How a relay ended, as a word.
fn end_word(end: RelayEnd) -> &'static str {
    match end {
        RelayEnd::Closed => "closed",
        RelayEnd::IdleTimeout => "idle_timeout",
        RelayEnd::ClientError(_) => "client_reset",
        RelayEnd::BackendError(_) => "backend_reset",
    }
}

fn format_line(format: AccessLogFormat, l: &Line<'_>) -> String {
    let duration_ms = l.duration.as_secs_f64() * 1000.0;
    match format {
        AccessLogFormat::Json => serde_json::json!({
            "time": l.time,
            "listener": l.listener,
            "peer": l.peer.to_string(),
            "matched": l.matched,
            "route": l.route,
            "backend": l.backend,
            "bytes_to_backend": l.to_backend,
            "bytes_to_client": l.outcome.backend_to_client,
            "duration_ms": (duration_ms * 1000.0).round() / 1000.0,
            "end": end_word(l.outcome.end),
        })
        .to_string(),
        AccessLogFormat::Text => format!(
            "time={} listener={} peer={} matched={} route={} backend={} bytes_to_backend={} bytes_to_client={} duration_ms={:.3} end={}",
            l.time,
            text_value(l.listener),
            l.peer,
            text_value(l.matched.unwrap_or("-")),
            text_value(l.route),
            text_value(l.backend),
            l.to_backend,
            l.outcome.backend_to_client,
            duration_ms,
            end_word(l.outcome.end),
        ),
    }
}

/// A value safe in a `key=value` line: names with spaces, quotes or
/// control characters are quoted with escapes (a client chose the SNI).
fn text_value(v: &str) -> String {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '=' && c != '\\')
    {
        v.to_owned()
    } else {
        format!("{v:?}")
    }
}

/// The writer thread: batches what is queued, flushes when the queue is
/// empty, ends when every sender is gone.
fn write_lines(mut rx: mpsc::Receiver<String>, sink: Box<dyn Write + Send>) {
    let mut out = std::io::BufWriter::new(sink);
    let mut warned = false;
    while let Some(line) = rx.blocking_recv() {
        let mut result = writeln!(out, "{line}");
        while let Ok(more) = rx.try_recv() {
            result = result.and_then(|()| writeln!(out, "{more}"));
        }
        result = result.and_then(|()| out.flush());
        match result {
            Err(e) if !warned => {
                tracing::warn!(error = %e, "cannot write the access log; lines are lost until it works again");
                warned = true;
            }
            Err(_) => {}
            Ok(()) => warned = false,
        }
    }
    let _ = out.flush();
}

/// The access log slot every listener reads, swapped on reload.
pub(crate) type Shared = Arc<arc_swap::ArcSwapOption<AccessLog>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn line(matched: Option<&str>, end: RelayEnd) -> Line<'_> {
        Line {
            time: "2026-11-25T15:30:00.123Z".into(),
            listener: "public",
            peer: "10.1.2.3:40000".parse().unwrap(),
            matched,
            route: "cluster-a",
            backend: "10.0.0.1:6443",
            to_backend: 517,
            outcome: Box::leak(Box::new(RelayOutcome {
                client_to_backend: 517,
                backend_to_client: 4096,
                end,
            })),
            duration: Duration::from_micros(12_345),
        }
    }

    #[test]
    fn text_lines_are_key_value_and_quote_what_a_client_chose() {
        let t = format_line(
            AccessLogFormat::Text,
            &line(Some("api.a.example.com"), RelayEnd::Closed),
        );
        assert_eq!(
            t,
            "time=2026-11-25T15:30:00.123Z listener=public peer=10.1.2.3:40000 matched=api.a.example.com route=cluster-a backend=10.0.0.1:6443 bytes_to_backend=517 bytes_to_client=4096 duration_ms=12.345 end=closed"
        );
        let odd = format_line(
            AccessLogFormat::Text,
            &line(
                Some("a b\n=x"),
                RelayEnd::BackendError(std::io::ErrorKind::ConnectionReset),
            ),
        );
        assert!(odd.contains(r#"matched="a b\n=x""#), "{odd}");
        assert!(odd.ends_with("end=backend_reset"), "{odd}");
        assert!(!odd.contains('\n'));
    }

    #[test]
    fn json_lines_parse_back() {
        let j = format_line(AccessLogFormat::Json, &line(None, RelayEnd::IdleTimeout));
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["matched"], serde_json::Value::Null);
        assert_eq!(v["bytes_to_client"], 4096);
        assert_eq!(v["end"], "idle_timeout");
        assert_eq!(v["duration_ms"], 12.345);
    }
}
