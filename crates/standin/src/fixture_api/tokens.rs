//! Bearer tokens the fixture knows, and the `TokenReview` answers it
//! gives for them.
//!
//! The file format is kube-apiserver's `--token-auth-file` (CSV: `token,
//! user,uid` and optionally `"group1,group2"`), with one addition: an
//! optional fifth column of audiences (`"aud1,aud2"`). A token with
//! audiences is valid only for a review that asks for one of them; a token
//! without is valid for any (as static tokens are on a real API server).
//! Empty lines and lines starting with `#` are skipped.

use serde_json::{json, Value};

pub use apiway_wire::token_file::{parse_token_file, StaticToken, TokenFileError};

/// The `status` of a `TokenReview` of `token` for `audiences` (empty:
/// any).
pub fn review(tokens: &[StaticToken], token: &str, audiences: &[String]) -> Value {
    let Some(known) = tokens.iter().find(|t| t.token == token) else {
        return json!({"authenticated": false, "error": "invalid bearer token"});
    };
    let granted: Vec<&String> = if known.audiences.is_empty() {
        audiences.iter().collect()
    } else if audiences.is_empty() {
        known.audiences.iter().collect()
    } else {
        audiences
            .iter()
            .filter(|a| known.audiences.contains(a))
            .collect()
    };
    if !audiences.is_empty() && granted.is_empty() {
        return json!({
            "authenticated": false,
            "error": "token audiences do not intersect the requested audiences",
        });
    }
    json!({
        "authenticated": true,
        "user": {"username": known.user, "uid": known.uid, "groups": known.groups},
        "audiences": granted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiway_wire::token_file::parse_token_file;

    #[test]
    fn reviews() {
        let tokens = parse_token_file("t1,alice,u1\nt2,agent,u2,\"g\",\"tunnel\"\n").unwrap();
        let aud = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(review(&tokens, "nope", &[])["authenticated"], false);
        assert_eq!(
            review(&tokens, "t1", &aud(&["x"]))["audiences"],
            json!(["x"])
        );
        let ok = review(&tokens, "t2", &aud(&["tunnel", "x"]));
        assert_eq!(ok["authenticated"], true);
        assert_eq!(ok["user"]["username"], "agent");
        assert_eq!(ok["audiences"], json!(["tunnel"]));
        assert_eq!(
            review(&tokens, "t2", &aud(&["api"]))["authenticated"],
            false
        );
        assert_eq!(review(&tokens, "t2", &[])["audiences"], json!(["tunnel"]));
    }
}
