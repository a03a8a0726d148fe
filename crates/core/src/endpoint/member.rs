//! One member of an endpoint set: its address and resolution, the verdict
//! of its active check, its passive ejection, its measured latency and its
//! active connections. Shared between connections and the checker, so its
//! state is atomic; calls that need the time have an `_at(now)` form.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::address::{is_local_ip, Address, Host};
use super::check::HealthCheck;
use super::penalty::Ejection;
use crate::metrics::BackendHandles;

/// `at` as milliseconds since a process-wide epoch, so deadlines fit in an
/// atomic. The epoch lies an hour before first use, so instants a caller
/// took a little earlier still map to distinct values.
fn epoch_ms(at: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(3600)).unwrap_or(now)
    });
    // Starting at 1 keeps 0 free to mean "not ejected".
    1 + at.saturating_duration_since(epoch).as_millis() as u64
}

/// One backend or API server endpoint.
#[derive(Debug)]
pub struct Endpoint {
    name: String,
    address: Address,
    resolved: Mutex<Arc<[SocketAddr]>>,
    active: AtomicUsize,
    /// Verdict of the active health check (true until a check says otherwise).
    up: AtomicBool,
    /// Deadline (see `epoch_ms`) until which passive ejection holds; 0 = none.
    ejected_until: AtomicU64,
    /// EWMA of probe latency in microseconds; 0 = not measured yet.
    latency_us: AtomicU64,
    /// Whether one of the resolved addresses is on a local interface.
    local: AtomicBool,
    /// Whether the last DNS resolution failed (so failures log once).
    dns_failed: AtomicBool,
    /// Wakes connections that asked to end when a check takes it down.
    marked_down: tokio::sync::Notify,
    streaks: Mutex<Streaks>,
    metrics: BackendHandles,
}

#[derive(Debug, Default)]
struct Streaks {
    connect_failures: u32,
    checks_ok: u32,
    checks_failed: u32,
}

impl Endpoint {
    /// Creates an endpoint; `metrics` are its handles.
    pub fn new(address: Address, metrics: BackendHandles) -> Endpoint {
        let resolved: Arc<[SocketAddr]> = match address.host {
            Host::Ip(ip) => Arc::from([SocketAddr::new(ip, address.port)]),
            Host::Name(_) => Arc::from([]),
        };
        metrics.healthy.set(1);
        let local = resolved.iter().any(|a| is_local_ip(a.ip()));
        Endpoint {
            name: address.to_string(),
            address,
            resolved: Mutex::new(resolved),
            active: AtomicUsize::new(0),
            up: AtomicBool::new(true),
            ejected_until: AtomicU64::new(0),
            latency_us: AtomicU64::new(0),
            local: AtomicBool::new(local),
            dns_failed: AtomicBool::new(false),
            marked_down: tokio::sync::Notify::new(),
            streaks: Mutex::new(Streaks::default()),
            metrics,
        }
    }

    /// The address as configured.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parsed address.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Connections currently leased.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// The metric handles (also the relay's byte observer).
    pub fn metrics(&self) -> &BackendHandles {
        &self.metrics
    }

    /// Whether the active health check says the endpoint is up.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Whether passive ejection currently holds the endpoint out.
    pub fn is_ejected(&self) -> bool {
        self.is_ejected_at(Instant::now())
    }

    /// Whether passive ejection holds the endpoint out at `now`.
    pub fn is_ejected_at(&self, now: Instant) -> bool {
        let until = self.ejected_until.load(Ordering::Relaxed);
        until != 0 && epoch_ms(now) < until
    }

    /// Takes new connections: up and not ejected.
    pub fn is_available(&self) -> bool {
        self.is_available_at(Instant::now())
    }

    /// Takes new connections at `now`: up and not ejected.
    pub fn is_available_at(&self, now: Instant) -> bool {
        self.is_up() && !self.is_ejected_at(now)
    }

    /// When the passive ejection ends, for ordering the last resort:
    /// 0 when not ejected, else a deadline that grows with time.
    pub(super) fn ejection_deadline(&self) -> u64 {
        self.ejected_until.load(Ordering::Relaxed)
    }

    /// The socket addresses last resolved (one for a literal address).
    pub fn resolved(&self) -> Arc<[SocketAddr]> {
        match self.resolved.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Re-resolves a DNS name; on failure the previous addresses stay.
    pub async fn resolve(&self) -> std::io::Result<Arc<[SocketAddr]>> {
        let Host::Name(name) = &self.address.host else {
            return Ok(self.resolved());
        };
        let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), self.address.port))
            .await?
            .collect();
        if found.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{name} resolved to no addresses"),
            ));
        }
        let found: Arc<[SocketAddr]> = Arc::from(found);
        if let Ok(mut g) = self.resolved.lock() {
            *g = found.clone();
        }
        self.local
            .store(found.iter().any(|a| is_local_ip(a.ip())), Ordering::Relaxed);
        Ok(found)
    }

    /// Records whether a DNS resolution failed; returns true when this
    /// changes the previous outcome, so a caller can log transitions only.
    pub fn note_dns_outcome(&self, failed: bool) -> bool {
        self.dns_failed.swap(failed, Ordering::Relaxed) != failed
    }

    /// Whether one of the endpoint's addresses is on a local interface.
    pub fn is_local(&self) -> bool {
        self.local.load(Ordering::Relaxed)
    }

    /// Re-checks whether the endpoint's addresses are local (interfaces
    /// change: an agent may add the address it serves).
    pub fn refresh_locality(&self) {
        let local = self.resolved().iter().any(|a| is_local_ip(a.ip()));
        self.local.store(local, Ordering::Relaxed);
    }

    /// The measured latency (EWMA of probe times), once measured.
    pub fn latency(&self) -> Option<Duration> {
        match self.latency_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Folds one probe's duration into the latency average. The weight of
    /// a new sample (1/4) follows a change within a few probes without
    /// letting one slow probe flip the choice.
    pub fn record_latency(&self, sample: Duration) {
        let sample = (sample.as_micros() as u64).max(1);
        let old = self.latency_us.load(Ordering::Relaxed);
        let new = if old == 0 {
            sample
        } else {
            ((old * 3 + sample) / 4).max(1)
        };
        self.latency_us.store(new, Ordering::Relaxed);
        self.metrics
            .latency_seconds
            .set(Duration::from_micros(new).as_secs_f64());
    }

    /// Ranking key for latency policies: lower is better; unmeasured last.
    pub(super) fn latency_rank(&self) -> u64 {
        match self.latency_us.load(Ordering::Relaxed) {
            0 => u64::MAX,
            us => us,
        }
    }

    fn streaks(&self) -> std::sync::MutexGuard<'_, Streaks> {
        match self.streaks.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn publish_health(&self) {
        self.metrics.healthy.set(i64::from(self.is_available()));
    }

    /// A connect attempt failed: eject for a backoff that grows with each
    /// consecutive failure.
    pub fn record_connect_failure(&self, ejection: &Ejection) {
        self.record_connect_failure_at(ejection, Instant::now());
    }

    /// [`record_connect_failure`](Self::record_connect_failure) at `now`.
    pub fn record_connect_failure_at(&self, ejection: &Ejection, now: Instant) {
        self.metrics.connect_failures.inc();
        let failures = {
            let mut s = self.streaks();
            s.connect_failures = s.connect_failures.saturating_add(1);
            s.connect_failures
        };
        let backoff = ejection.backoff(failures);
        self.ejected_until
            .store(epoch_ms(now + backoff), Ordering::Relaxed);
        self.publish_health();
        tracing::warn!(backend = %self.name, failures, backoff = ?backoff, "connect failed; backend ejected");
    }

    /// A connect attempt succeeded: forget earlier failures.
    pub fn record_connect_success(&self) {
        let had_failures = {
            let mut s = self.streaks();
            std::mem::take(&mut s.connect_failures) > 0
        };
        if had_failures {
            self.ejected_until.store(0, Ordering::Relaxed);
            self.publish_health();
        }
    }

    /// Applies an active health check result with rise/fall thresholds.
    /// Returns the new verdict when it changed.
    pub fn record_check(&self, ok: bool, check: &HealthCheck) -> Option<bool> {
        let mut changed = None;
        {
            let mut s = self.streaks();
            if ok {
                self.metrics.checks_ok.inc();
                s.checks_failed = 0;
                s.checks_ok = s.checks_ok.saturating_add(1);
                if !self.is_up() && s.checks_ok >= check.rise {
                    self.up.store(true, Ordering::Relaxed);
                    changed = Some(true);
                }
                if s.connect_failures > 0 {
                    // The probe reached it: a stale ejection only delays recovery.
                    s.connect_failures = 0;
                    self.ejected_until.store(0, Ordering::Relaxed);
                }
            } else {
                self.metrics.checks_failed.inc();
                s.checks_ok = 0;
                s.checks_failed = s.checks_failed.saturating_add(1);
                if self.is_up() && s.checks_failed >= check.fall {
                    self.up.store(false, Ordering::Relaxed);
                    changed = Some(false);
                    self.marked_down.notify_waiters();
                }
            }
        }
        self.publish_health();
        changed
    }

    /// Completes the next time an active health check takes the endpoint
    /// down. A relay that must not outlive a hung endpoint selects on it;
    /// call [`Notified::enable`](tokio::sync::futures::Notified::enable)
    /// (or poll it) before relaying so a verdict in between is not missed.
    pub fn marked_down(&self) -> tokio::sync::futures::Notified<'_> {
        self.marked_down.notified()
    }

    /// Forgets what active checks said: the endpoint counts as up again.
    pub fn forget_check_verdict(&self) {
        {
            let mut s = self.streaks();
            s.checks_ok = 0;
            s.checks_failed = 0;
        }
        self.up.store(true, Ordering::Relaxed);
        self.publish_health();
    }

    /// Leases the endpoint for one connection; the lease counts it active.
    pub fn lease(self: &Arc<Self>) -> Lease {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.metrics.active.inc();
        self.metrics.connections.inc();
        Lease {
            endpoint: self.clone(),
        }
    }
}

/// Counts a connection as active on its endpoint until dropped.
#[derive(Debug)]
pub struct Lease {
    endpoint: Arc<Endpoint>,
}

impl Lease {
    /// The leased endpoint.
    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.endpoint
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.endpoint.active.fetch_sub(1, Ordering::Relaxed);
        self.endpoint.metrics.active.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_is_a_moving_average() {
        let e = Endpoint::new(
            Address::parse("127.0.0.1:1").unwrap(),
            BackendHandles::default(),
        );
        assert_eq!(e.latency(), None);
        e.record_latency(Duration::from_millis(40));
        assert_eq!(e.latency(), Some(Duration::from_millis(40)));
        e.record_latency(Duration::from_millis(0));
        assert_eq!(e.latency(), Some(Duration::from_millis(30)));
        assert!((e.metrics().latency_seconds.get() - 0.030).abs() < 1e-9);
    }

    #[tokio::test]
    async fn a_check_taking_the_endpoint_down_wakes_its_connections() {
        let e = Endpoint::new(
            Address::parse("127.0.0.1:1").unwrap(),
            BackendHandles::default(),
        );
        let check = crate::endpoint::check::HealthCheck::tcp(1, 2);
        let down = e.marked_down();
        tokio::pin!(down);
        down.as_mut().enable();
        e.record_check(false, &check);
        assert!(
            futures_poll(down.as_mut()).is_pending(),
            "one failure of fall 2"
        );
        e.record_check(false, &check);
        assert!(futures_poll(down.as_mut()).is_ready());
    }

    fn futures_poll<F: std::future::Future>(
        f: std::pin::Pin<&mut F>,
    ) -> std::task::Poll<F::Output> {
        let waker = std::task::Waker::noop();
        f.poll(&mut std::task::Context::from_waker(waker))
    }

    #[test]
    fn ejection_backoff_grows_and_is_capped() {
        let e = Endpoint::new(
            Address::parse("127.0.0.1:1").unwrap(),
            BackendHandles::default(),
        );
        let ej = Ejection {
            base: Duration::from_millis(100),
            max: Duration::from_millis(350),
        };
        let now = Instant::now();
        let before = epoch_ms(now);
        e.record_connect_failure_at(&ej, now);
        let first = e.ejected_until.load(Ordering::Relaxed) - before;
        e.record_connect_failure_at(&ej, now);
        let second = e.ejected_until.load(Ordering::Relaxed) - before;
        e.record_connect_failure_at(&ej, now);
        let third = e.ejected_until.load(Ordering::Relaxed) - before;
        assert!((100..150).contains(&first), "{first}");
        assert!((200..250).contains(&second), "{second}");
        assert!((350..400).contains(&third), "{third}");
        // Time is passed in: the ejection ends exactly at its deadline.
        assert!(e.is_ejected_at(now + Duration::from_millis(349)));
        assert!(!e.is_ejected_at(now + Duration::from_millis(351)));
        assert!(e.is_available_at(now + Duration::from_millis(351)));
    }
}
