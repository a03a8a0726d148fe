//! Who a bearer token belongs to, by a `TokenReview` (authentication.k8s.io
//! v1): what kube-apiserver answers for a projected ServiceAccount token.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};

/// Why a token was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The API server says the token is not valid (or not for these
    /// audiences).
    #[error("{0}")]
    Rejected(String),
    /// The token is valid, but for none of the audiences asked for.
    #[error("the token is for audiences {got:?}, not {wanted:?}")]
    WrongAudience {
        /// The token's.
        got: Vec<String>,
        /// Asked for.
        wanted: Vec<String>,
    },
    /// The review itself failed (API server unreachable, no permission).
    #[error("the TokenReview failed: {0}")]
    Failed(String),
}

/// The user name a token authenticates as, checked for `audiences` (none:
/// the API server's own).
pub async fn review(
    client: &kube::Client,
    token: &str,
    audiences: &[String],
) -> Result<String, ReviewError> {
    let api: Api<TokenReview> = Api::all(client.clone());
    let request = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: (!audiences.is_empty()).then(|| audiences.to_vec()),
        },
        ..TokenReview::default()
    };
    let answer = api
        .create(&PostParams::default(), &request)
        .await
        .map_err(|e| ReviewError::Failed(e.to_string()))?;
    let status = answer.status.unwrap_or_default();
    if status.authenticated != Some(true) {
        let error = status
            .error
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "the token is not valid".into());
        return Err(ReviewError::Rejected(error));
    }
    let got = status.audiences.unwrap_or_default();
    if !audiences.is_empty() && !got.iter().any(|a| audiences.contains(a)) {
        return Err(ReviewError::WrongAudience {
            got,
            wanted: audiences.to_vec(),
        });
    }
    status
        .user
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ReviewError::Rejected("the review names no user".into()))
}
