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

/// One known token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticToken {
    /// The bearer token.
    pub token: String,
    /// `user.username`.
    pub user: String,
    /// `user.uid`.
    pub uid: String,
    /// `user.groups`.
    pub groups: Vec<String>,
    /// The audiences the token is for; empty: any.
    pub audiences: Vec<String>,
}

/// The most tokens one file may hold (the fixture is for tests and demos).
pub const MAX_TOKENS: usize = 10_000;

/// Parses a token file; the error names the line and what is wrong.
pub fn parse_token_file(text: &str) -> Result<Vec<StaticToken>, String> {
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields = csv_fields(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        if !(3..=5).contains(&fields.len()) {
            return Err(format!(
                "line {}: expected token,user,uid[,\"groups\"[,\"audiences\"]], found {} fields",
                i + 1,
                fields.len()
            ));
        }
        if fields[0].is_empty() || fields[1].is_empty() {
            return Err(format!(
                "line {}: the token and the user must not be empty",
                i + 1
            ));
        }
        let list = |n: usize| -> Vec<String> {
            fields
                .get(n)
                .map(|f| {
                    f.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        if tokens.len() == MAX_TOKENS {
            return Err(format!("more than {MAX_TOKENS} tokens"));
        }
        tokens.push(StaticToken {
            token: fields[0].clone(),
            user: fields[1].clone(),
            uid: fields[2].clone(),
            groups: list(3),
            audiences: list(4),
        });
    }
    Ok(tokens)
}

/// The fields of one CSV line: commas separate, `"..."` quotes (with `""`
/// for a quote inside).
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("a quoted field is not closed".into()),
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => {}
                Some(c) => return Err(format!("unexpected {c:?} after a quoted field")),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field.trim().to_owned());
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some('"') => return Err("a quote inside an unquoted field".into()),
                    Some(c) => field.push(c),
                }
            }
        }
        fields.push(field.trim().to_owned());
    }
}

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

    #[test]
    fn the_file_format() {
        let tokens = parse_token_file(
            "# comment\n\nt1,alice,u1\nt2,system:serviceaccount:ns:agent,u2,\"g1, g2\",\"tunnel,other\"\n\"t,3\",bob,u3,\"\"\n",
        )
        .unwrap();
        assert_eq!(tokens.len(), 3);
        assert_eq!(tokens[1].groups, ["g1", "g2"]);
        assert_eq!(tokens[1].audiences, ["tunnel", "other"]);
        assert_eq!(tokens[2].token, "t,3");
        assert!(tokens[2].groups.is_empty());
        for bad in [
            "t1,alice",
            "\"t1,alice,u1",
            "t\"1,a,u",
            ",alice,u",
            "a,b,c,d,e,f",
            "\"a\"x,b,c",
        ] {
            assert!(parse_token_file(bad).is_err(), "{bad}");
        }
        assert!(parse_token_file("t,a,u\nbroken")
            .unwrap_err()
            .starts_with("line 2:"));
    }

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
