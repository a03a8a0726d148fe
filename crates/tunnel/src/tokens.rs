//! Bearer tokens on the tunnel: the server's TokenReview check (cached),
//! and the agent's token file (re-read when it changes: projected tokens
//! rotate).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use apiway_core::sync::lock;
use apiway_kube::token_review::{self, ReviewError};

use crate::config::TokenSettings;

/// How long an accepted token is believed without a new review.
const ACCEPTED_FOR: Duration = Duration::from_secs(60);
/// How long a refused token is refused without a new review.
const REFUSED_FOR: Duration = Duration::from_secs(5);
/// Reviews remembered at most.
const CACHE_MAX: usize = 10_000;

/// A refusal: the metric reason and the message for the agent.
pub type Refusal = (&'static str, String);

/// A remembered review: the verdict and until when it holds.
type Remembered = (Result<Arc<str>, Refusal>, Instant);

/// The token file's version (modification time, size) and its token.
type Read = (Option<SystemTime>, u64, Arc<str>);

/// The server's check of bearer tokens.
pub struct TokenAuth {
    settings: TokenSettings,
    client: tokio::sync::OnceCell<kube::Client>,
    cache: Mutex<HashMap<String, Remembered>>,
}

impl TokenAuth {
    /// A checker; the Kubernetes client is built at the first review.
    pub fn new(settings: TokenSettings) -> TokenAuth {
        TokenAuth {
            settings,
            client: tokio::sync::OnceCell::new(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The identity `token` proves (`system:serviceaccount:NS:NAME`), if
    /// it is valid, for the audiences, and of an allowed service account.
    pub async fn check(&self, token: &str) -> Result<Arc<str>, Refusal> {
        let now = Instant::now();
        if let Some((verdict, until)) = lock(&self.cache).get(token) {
            if *until > now {
                return verdict.clone();
            }
        }
        let client = self
            .client
            .get_or_try_init(|| apiway_kube::client(self.settings.kubeconfig.as_deref()))
            .await
            .map_err(|e| {
                (
                    "token_review_failed",
                    format!("cannot review tokens: {e:#}"),
                )
            })?;
        let verdict: Result<Arc<str>, Refusal> =
            match token_review::review(client, token, &self.settings.audiences).await {
                Ok(user) if self.settings.users.contains(&user) => Ok(user.into()),
                Ok(user) => Err((
                    "service_account_not_allowed",
                    format!("`{user}` is not an --allowed-service-account of this tunnel server"),
                )),
                Err(e @ ReviewError::WrongAudience { .. }) => {
                    Err(("wrong_audience", e.to_string()))
                }
                Err(ReviewError::Rejected(e)) => {
                    // kube-apiserver says "audience" in the error when that
                    // is what failed.
                    let reason = if e.contains("audience") {
                        "wrong_audience"
                    } else {
                        "bad_token"
                    };
                    Err((reason, format!("the token was rejected: {e}")))
                }
                // Not remembered: the next stream asks again.
                Err(e @ ReviewError::Failed(_)) => {
                    return Err(("token_review_failed", e.to_string()))
                }
            };
        let ttl = if verdict.is_ok() {
            ACCEPTED_FOR
        } else {
            REFUSED_FOR
        };
        let mut cache = lock(&self.cache);
        if cache.len() >= CACHE_MAX {
            cache.retain(|_, (_, until)| *until > now);
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(token.to_owned(), (verdict.clone(), now + ttl));
        verdict
    }
}

/// The agent's token, read from its file again when the file changes.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    current: Mutex<Option<Read>>,
}

impl TokenFile {
    /// A token read from `path`.
    pub fn new(path: PathBuf) -> TokenFile {
        TokenFile {
            path,
            current: Mutex::new(None),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The token (trimmed); read again when the file's size or
    /// modification time changed.
    pub fn token(&self) -> Result<Arc<str>, String> {
        let meta = std::fs::metadata(&self.path)
            .map_err(|e| format!("--tunnel-token-file {}: {e}", self.path.display()))?;
        let stamp = (meta.modified().ok(), meta.len());
        let mut current = lock(&self.current);
        if let Some((m, l, token)) = current.as_ref() {
            if (*m, *l) == stamp {
                return Ok(token.clone());
            }
        }
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("--tunnel-token-file {}: {e}", self.path.display()))?;
        let token = text.trim();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "--tunnel-token-file {}: holds no token (one line of printable ASCII)",
                self.path.display()
            ));
        }
        let token: Arc<str> = token.into();
        *current = Some((stamp.0, stamp.1, token.clone()));
        Ok(token)
    }
}
