//! kube-apiserver's static token file (`--token-auth-file`), as the
//! fixture Kubernetes API reads it (`apiway standin --token-file`): CSV
//! lines `token,user,uid` with an optional `"group1,group2"` column, plus
//! one addition, an optional fifth `"aud1,aud2"` column of audiences.
//! Empty lines and lines starting with `#` are skipped.

use thiserror::Error;

/// Why a token file does not parse.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TokenFileError {
    /// Line `line` is malformed.
    #[error("line {line}: {reason}")]
    Line {
        /// 1-based.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// More than [`MAX_TOKENS`] tokens.
    #[error("more than {MAX_TOKENS} tokens")]
    TooMany,
}

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
pub fn parse_token_file(text: &str) -> Result<Vec<StaticToken>, TokenFileError> {
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |reason: String| TokenFileError::Line {
            line: i + 1,
            reason,
        };
        let fields = csv_fields(line).map_err(bad)?;
        if !(3..=5).contains(&fields.len()) {
            return Err(bad(format!(
                "expected token,user,uid[,\"groups\"[,\"audiences\"]], found {} fields",
                fields.len()
            )));
        }
        if fields[0].is_empty() || fields[1].is_empty() {
            return Err(bad("the token and the user must not be empty".into()));
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
            return Err(TokenFileError::TooMany);
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
            .to_string()
            .starts_with("line 2:"));
    }
}
