//! The config source seam: where a role's configuration comes from.
//!
//! A [`Source`] runs as a task and sends [`SourceEvent`]s: the role's typed
//! spec fragment (or why it could not make one) at start and on every
//! change. The runtime keeps the latest fragment of each source, merges them
//! in order with [`Merge`], validates the result into a snapshot and applies
//! it. A file ([`FileSource`]) is one source, the command line
//! ([`StaticSource`]) another; a Kubernetes watch is one more implementation.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Fragments of a role's spec from several sources combine into one.
pub trait Merge: Sized {
    /// `self` with `later` (from a source listed after it) merged in; an
    /// error names what the two disagree on.
    fn merge(self, later: Self) -> Result<Self, String>;
}

/// What made a source send a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The first load.
    Start,
    /// The source saw a change.
    Change,
    /// An operator asked for a reload (SIGHUP).
    Signal,
}

impl Trigger {
    /// How logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::Change => "change",
            Trigger::Signal => "SIGHUP",
        }
    }
}

/// One message from a source.
#[derive(Debug)]
pub struct SourceEvent<F> {
    /// Which source (its position in the list the runtime was given).
    pub index: usize,
    /// The new fragment, or why there is none; an error keeps the running
    /// configuration.
    pub fragment: Result<F, String>,
    /// What caused it.
    pub trigger: Trigger,
    /// Time spent decoding it.
    pub took: Duration,
    /// Whether the source has read everything once (a Kubernetes source
    /// before its first full sync sends what it has with `false`).
    pub synced: bool,
}

/// What a running source is given: where to send, and what the runtime
/// tells it.
#[derive(Clone, Debug)]
pub struct SourceSender<F> {
    index: usize,
    tx: mpsc::Sender<SourceEvent<F>>,
    /// How often to look for changes (the running config's `reload_interval`).
    pub poll: watch::Receiver<Duration>,
    /// Bumped on SIGHUP: read again even if nothing seems changed.
    pub resync: watch::Receiver<u64>,
    /// Fires when the role stops.
    pub stop: CancellationToken,
}

impl<F> SourceSender<F> {
    /// A sender for the source at `index`.
    pub fn new(
        index: usize,
        tx: mpsc::Sender<SourceEvent<F>>,
        poll: watch::Receiver<Duration>,
        resync: watch::Receiver<u64>,
        stop: CancellationToken,
    ) -> SourceSender<F> {
        SourceSender {
            index,
            tx,
            poll,
            resync,
            stop,
        }
    }

    /// Sends one event; `false` once nobody listens any more.
    pub async fn send(
        &self,
        fragment: Result<F, String>,
        trigger: Trigger,
        took: Duration,
    ) -> bool {
        self.send_synced(fragment, trigger, took, true).await
    }

    /// [`send`](Self::send), saying whether the source has synced.
    pub async fn send_synced(
        &self,
        fragment: Result<F, String>,
        trigger: Trigger,
        took: Duration,
        synced: bool,
    ) -> bool {
        self.tx
            .send(SourceEvent {
                index: self.index,
                fragment,
                trigger,
                took,
                synced,
            })
            .await
            .is_ok()
    }
}

/// A place a role's configuration comes from.
pub trait Source<F>: Send + 'static {
    /// How errors and logs name it (`/etc/apiway/gateway.yaml`, `flags`).
    fn label(&self) -> String;

    /// Whether it never changes (flags): its errors need no label, and it
    /// never triggers a reload.
    fn is_static(&self) -> bool {
        false
    }

    /// Registers the source's own metrics (a Kubernetes source's watch
    /// errors) in the role's registry, before it runs.
    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let _ = registry;
    }

    /// Sends the first fragment at once, then one per change, until `out.stop`.
    fn run(self: Box<Self>, out: SourceSender<F>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// A fixed fragment: the command line.
pub struct StaticSource<F> {
    label: String,
    value: F,
}

impl<F> StaticSource<F> {
    /// A source that always says `value`.
    pub fn new(label: impl Into<String>, value: F) -> StaticSource<F> {
        StaticSource {
            label: label.into(),
            value,
        }
    }
}

impl<F: Send + 'static> Source<F> for StaticSource<F> {
    fn label(&self) -> String {
        self.label.clone()
    }

    fn is_static(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, out: SourceSender<F>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            out.send(Ok(self.value), Trigger::Start, Duration::ZERO)
                .await;
        })
    }
}

/// Turns a file's text into a fragment.
pub type Decode<F> = Arc<dyn Fn(&str) -> Result<F, String> + Send + Sync>;

/// A configuration file (YAML, or JSON when it starts with `{`), decoded
/// by the role and watched for changes.
///
/// The file is polled (size and modification time, then content) rather
/// than watched with inotify, because Kubernetes updates mounted ConfigMaps
/// by swapping a symlink, which file watches miss. SIGHUP reads it again
/// even when it looks unchanged.
pub struct FileSource<F> {
    path: PathBuf,
    decode: Decode<F>,
    max_bytes: u64,
}

/// The largest config file read unless [`FileSource::with_max_bytes`] says
/// (`--max-config-bytes`): checked before parsing, the same for YAML and
/// JSON, so a runaway file cannot take the process's memory.
pub const DEFAULT_MAX_CONFIG_BYTES: u64 = 16 << 20;

impl<F> FileSource<F> {
    /// Watches `path`, decoding each version with `decode`.
    pub fn new(
        path: impl Into<PathBuf>,
        decode: impl Fn(&str) -> Result<F, String> + Send + Sync + 'static,
    ) -> FileSource<F> {
        FileSource {
            path: path.into(),
            decode: Arc::new(decode),
            max_bytes: DEFAULT_MAX_CONFIG_BYTES,
        }
    }

    /// Refuses files over `max_bytes` (before parsing them).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> FileSource<F> {
        self.max_bytes = max_bytes;
        self
    }
}

/// Reads `path` as text, at most `max_bytes` of it; a larger file is an
/// error naming the limit and its flag.
fn read_limited(path: &Path, max_bytes: u64) -> Result<String, String> {
    use std::io::Read;
    let cannot = |e: std::io::Error| format!("cannot read the config file {}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > max_bytes {
        return Err(format!(
            "the config file {} is larger than {max_bytes} bytes (raise --max-config-bytes if it is meant to be)",
            path.display()
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| format!("the config file {} is not UTF-8 text", path.display()))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

impl<F: Send + 'static> Source<F> for FileSource<F> {
    fn label(&self) -> String {
        self.path.display().to_string()
    }

    fn run(self: Box<Self>, out: SourceSender<F>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let FileSource {
                path,
                decode,
                max_bytes,
            } = *self;
            let mut out = out;
            // `took` counts decoding, not reading: the reload metric is the
            // time to parse, validate and apply.
            let decoded = |text: Result<String, String>| {
                let started = Instant::now();
                let fragment = text.as_deref().map_err(Clone::clone).and_then(|t| {
                    decode(t).map_err(|e| {
                        crate::config_text::name_source(&e, &path.display().to_string())
                    })
                });
                (text.ok(), fragment, started.elapsed())
            };
            let read = || async {
                let file = path.clone();
                let text = tokio::task::spawn_blocking(move || read_limited(&file, max_bytes))
                    .await
                    .unwrap_or_else(|e| Err(format!("reading the config file: {e}")));
                decoded(text)
            };
            let mut last_stamp = stamp(&path);
            // The first read is a plain blocking one, as the process starts:
            // a role whose file never changes then never starts tokio's
            // blocking-pool thread.
            let (text, fragment, took) = decoded(read_limited(&path, max_bytes));
            let mut last_text = text;
            if !out.send(fragment, Trigger::Start, took).await {
                return;
            }
            loop {
                let poll = *out.poll.borrow_and_update();
                let trigger = tokio::select! {
                    _ = out.stop.cancelled() => return,
                    _ = tokio::time::sleep(poll) => Trigger::Change,
                    // A new interval (a reload applied one): sleep anew with it.
                    changed = out.poll.changed() => match changed {
                        Ok(()) => continue,
                        Err(_) => return,
                    },
                    changed = out.resync.changed() => match changed {
                        Ok(()) => Trigger::Signal,
                        Err(_) => return,
                    },
                };
                let now_stamp = stamp(&path);
                if trigger == Trigger::Change && now_stamp == last_stamp {
                    continue;
                }
                last_stamp = now_stamp;
                let (text, fragment, took) = read().await;
                if trigger == Trigger::Change && text.is_some() && text == last_text {
                    continue;
                }
                if text.is_some() {
                    last_text = text;
                }
                if !out.send(fragment, trigger, took).await {
                    return;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Harness<F> {
        rx: mpsc::Receiver<SourceEvent<F>>,
        resync: watch::Sender<u64>,
        poll: watch::Sender<Duration>,
        stop: CancellationToken,
    }

    fn sender<F>() -> (SourceSender<F>, Harness<F>) {
        let (tx, rx) = mpsc::channel(8);
        let (poll_tx, poll) = watch::channel(Duration::from_millis(20));
        let (resync_tx, resync) = watch::channel(0);
        let stop = CancellationToken::new();
        (
            SourceSender::new(0, tx, poll, resync, stop.clone()),
            Harness {
                rx,
                resync: resync_tx,
                poll: poll_tx,
                stop,
            },
        )
    }

    fn lines(text: &str) -> Result<usize, String> {
        if text.contains("bad") {
            Err("bad line".into())
        } else {
            Ok(text.lines().count())
        }
    }

    #[tokio::test]
    async fn file_source_sends_changes_errors_and_forced_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "a\n").unwrap();
        let (out, mut h) = sender();
        let task = tokio::spawn(Box::new(FileSource::new(&path, lines)).run(out));
        let rx = &mut h.rx;
        let first = rx.recv().await.unwrap();
        assert_eq!((first.fragment, first.trigger), (Ok(1), Trigger::Start));

        std::fs::write(&path, "a\nb\n").unwrap();
        let changed = rx.recv().await.unwrap();
        assert_eq!(
            (changed.fragment, changed.trigger),
            (Ok(2), Trigger::Change)
        );

        std::fs::write(&path, "bad\n").unwrap();
        let bad = rx.recv().await.unwrap();
        assert_eq!(bad.fragment, Err("bad line".into()));

        std::fs::write(&path, "a\nb\n").unwrap();
        assert_eq!(rx.recv().await.unwrap().fragment, Ok(2));

        // Unchanged: nothing, unless forced.
        assert!(tokio::time::timeout(Duration::from_millis(150), rx.recv())
            .await
            .is_err());
        h.resync.send_modify(|n| *n += 1);
        let forced = rx.recv().await.unwrap();
        assert_eq!((forced.fragment, forced.trigger), (Ok(2), Trigger::Signal));

        // A long interval: a change waits for it, unless a new interval
        // comes (what a reload of `reload_interval` does).
        h.poll.send_replace(Duration::from_secs(3600));
        tokio::time::sleep(Duration::from_millis(50)).await;
        std::fs::write(&path, "a\nb\nc\n").unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(150), rx.recv())
            .await
            .is_err());
        h.poll.send_replace(Duration::from_millis(20));
        assert_eq!(rx.recv().await.unwrap().fragment, Ok(3));

        std::fs::remove_file(&path).unwrap();
        let gone = rx.recv().await.unwrap();
        assert!(gone
            .fragment
            .unwrap_err()
            .contains("cannot read the config file"));
        h.stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn static_source_sends_once() {
        let (out, mut h) = sender();
        Box::new(StaticSource::new("flags", 7)).run(out).await;
        let e = h.rx.recv().await.unwrap();
        assert_eq!((e.fragment, e.trigger), (Ok(7), Trigger::Start));
        assert!(h.rx.recv().await.is_none());
    }
}
