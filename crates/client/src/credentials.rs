//! Credentials that change while a [`Client`](crate::Client) runs: an exec
//! credential plugin's token that expires, a service-account token file
//! that the kubelet rotates.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use apiway_core::sync::lock;

use crate::error::Error;

/// The future [`Credentials::authorization`] returns.
pub type AuthorizationFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<http::HeaderValue>, String>> + Send + 'a>>;

/// Where each request's `Authorization` header comes from when it is not
/// fixed ([`ClientConfig::credentials`](crate::ClientConfig::credentials)).
///
/// The client asks before every request that does not carry its own
/// `Authorization` header, so an implementation caches the value and
/// refreshes it only when it is about to expire. An error fails the
/// request with [`Error::Credentials`](crate::Error::Credentials), before
/// anything is sent.
pub trait Credentials: Send + Sync + fmt::Debug {
    /// The header value for the next request (`None`: send none). The
    /// value should be marked sensitive, so HTTP/2 never indexes it.
    fn authorization(&self) -> AuthorizationFuture<'_>;
}

/// How long a token read from a file is used before the file is read
/// again (the kubelet rotates projected service-account tokens when 80 %
/// of their life, at least an hour, has passed).
pub const TOKEN_FILE_REREAD: Duration = Duration::from_secs(60);

/// A bearer token read from a file (`tokenFile` in a kubeconfig, a
/// projected service-account token), read again once it is
/// [`TOKEN_FILE_REREAD`] old, so a rotated token is picked up. Surrounding
/// whitespace (a trailing newline) is dropped; an empty file is an error,
/// as for a health check's `bearer_token_file`. When a later read fails,
/// the last token read is kept, with a warning.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    cached: Mutex<(http::HeaderValue, Instant)>,
}

impl TokenFile {
    /// Reads `path` now, so a missing or unusable file is an error at
    /// start rather than on the first request.
    pub fn new(path: impl Into<PathBuf>) -> Result<TokenFile, Error> {
        let path = path.into();
        let value = read_token(&path).map_err(Error::Credentials)?;
        Ok(TokenFile {
            path,
            cached: Mutex::new((value, Instant::now())),
        })
    }
}

impl Credentials for TokenFile {
    fn authorization(&self) -> AuthorizationFuture<'_> {
        let mut cached = lock(&self.cached);
        if cached.1.elapsed() >= TOKEN_FILE_REREAD {
            match read_token(&self.path) {
                Ok(value) => cached.0 = value,
                Err(e) => tracing::warn!("{e}; the last token read is used"),
            }
            // Read again in a minute either way, not on every request.
            cached.1 = Instant::now();
        }
        let value = cached.0.clone();
        Box::pin(std::future::ready(Ok(Some(value))))
    }
}

fn read_token(path: &Path) -> Result<http::HeaderValue, String> {
    let token = apiway_core::health::read_token(path).map_err(|e| format!("the token file {e}"))?;
    bearer(&token).ok_or_else(|| {
        format!(
            "the token file {} holds characters an Authorization header cannot carry",
            path.display()
        )
    })
}

/// `Bearer <token>` (trimmed), marked sensitive so HTTP/2 never indexes
/// it; `None` when the token cannot be a header value.
pub(crate) fn bearer(token: &str) -> Option<http::HeaderValue> {
    let mut value = http::HeaderValue::from_str(&format!("Bearer {}", token.trim())).ok()?;
    value.set_sensitive(true);
    Some(value)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The header `credentials` give now, checked to be sensitive.
    pub(crate) async fn header(credentials: &dyn Credentials) -> String {
        let value = credentials
            .authorization()
            .await
            .expect("a value")
            .expect("a header");
        assert!(value.is_sensitive());
        value.to_str().expect("text").to_owned()
    }

    #[tokio::test]
    async fn token_file_is_trimmed_read_again_and_kept_when_it_goes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").expect("write");
        let credentials = TokenFile::new(&path).expect("readable");
        assert_eq!(header(&credentials).await, "Bearer first");
        // Rotated: not read again until the cached one is a minute old.
        std::fs::write(&path, "second").expect("write");
        assert_eq!(header(&credentials).await, "Bearer first");
        lock(&credentials.cached).1 -= TOKEN_FILE_REREAD;
        assert_eq!(header(&credentials).await, "Bearer second");
        // Gone: the last token is kept.
        std::fs::remove_file(&path).expect("remove");
        lock(&credentials.cached).1 -= TOKEN_FILE_REREAD;
        assert_eq!(header(&credentials).await, "Bearer second");
    }

    #[test]
    fn unreadable_token_files_are_refused_at_start() {
        let dir = tempfile::tempdir().expect("temp dir");
        let err = TokenFile::new(dir.path().join("missing")).expect_err("missing");
        assert!(err.to_string().contains("missing"), "{err}");
        let path = dir.path().join("bad");
        std::fs::write(&path, "a\u{7f}b").expect("write");
        let err = TokenFile::new(&path).expect_err("bad");
        assert!(err.to_string().contains("cannot carry"), "{err}");
    }
}
