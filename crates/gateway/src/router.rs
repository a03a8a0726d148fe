//! SNI routing: exact names and `*.suffix` wildcards.
//!
//! Matching is case-insensitive and ignores one trailing dot. An exact name
//! beats any wildcard; among wildcards the longest suffix wins. A wildcard
//! `*.a.example.com` matches one or more labels in front of
//! `a.example.com` but not `a.example.com` itself; `*` alone matches every
//! name (and is the last resort). A lookup costs one hash probe per label of
//! the name, however many routes there are.

use std::borrow::Cow;
use std::collections::HashMap;

/// A hostname pattern from a route.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// `api.a.example.com`
    Exact(String),
    /// `*.a.example.com`, stored as the suffix `a.example.com`.
    Wildcard(String),
    /// `*`: every name.
    Any,
}

impl HostPattern {
    /// Parses and normalizes a pattern; the error says what is wrong.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let lower = normalize(text);
        if text == "*" {
            return Ok(HostPattern::Any);
        }
        if let Some(suffix) = lower.strip_prefix("*.") {
            check_name(suffix).map_err(|e| format!("`{text}`: {e}"))?;
            return Ok(HostPattern::Wildcard(suffix.to_owned()));
        }
        if lower.contains('*') {
            return Err(format!(
                "`{text}`: a wildcard must be a whole leftmost label, like `*.example.com`"
            ));
        }
        check_name(&lower).map_err(|e| format!("`{text}`: {e}"))?;
        Ok(HostPattern::Exact(lower.into_owned()))
    }
}

fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > 253 {
        return Err("a hostname must have 1 to 253 characters");
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("every label must have 1 to 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err("only letters, digits, `-` and `_` may appear in a label");
        }
    }
    Ok(())
}

/// Lowercases and drops one trailing dot, allocating only when needed.
fn normalize(name: &str) -> Cow<'_, str> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase())
    } else {
        Cow::Borrowed(name)
    }
}

/// Maps server names to route indexes.
#[derive(Clone, Debug, Default)]
pub struct SniRouter {
    exact: HashMap<Box<str>, usize>,
    wildcard: HashMap<Box<str>, usize>,
    any: Option<usize>,
}

impl SniRouter {
    /// Adds a pattern; if it is already taken, returns the route that has it.
    pub fn insert(&mut self, pattern: HostPattern, route: usize) -> Result<(), usize> {
        let (map, key) = match pattern {
            HostPattern::Exact(n) => (&mut self.exact, n),
            HostPattern::Wildcard(s) => (&mut self.wildcard, s),
            HostPattern::Any => {
                return match self.any {
                    Some(other) => Err(other),
                    None => {
                        self.any = Some(route);
                        Ok(())
                    }
                }
            }
        };
        match map.entry(key.into_boxed_str()) {
            std::collections::hash_map::Entry::Occupied(o) => Err(*o.get()),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(route);
                Ok(())
            }
        }
    }

    /// The route for `server_name`, if any pattern matches.
    pub fn lookup(&self, server_name: &str) -> Option<usize> {
        let name = normalize(server_name);
        if let Some(&r) = self.exact.get(name.as_ref()) {
            return Some(r);
        }
        if self.wildcard.is_empty() {
            return self.any;
        }
        // Suffixes from longest to shortest: after the first dot, the second...
        let mut rest: &str = &name;
        while let Some((_, suffix)) = rest.split_once('.') {
            if let Some(&r) = self.wildcard.get(suffix) {
                return Some(r);
            }
            rest = suffix;
        }
        self.any
    }

    /// Number of patterns.
    pub fn len(&self) -> usize {
        self.exact.len() + self.wildcard.len() + usize::from(self.any.is_some())
    }

    /// Whether no pattern is set.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(patterns: &[(&str, usize)]) -> SniRouter {
        let mut r = SniRouter::default();
        for (p, i) in patterns {
            r.insert(HostPattern::parse(p).unwrap(), *i).unwrap();
        }
        r
    }

    #[test]
    fn exact_beats_wildcard_and_longer_suffix_beats_shorter() {
        let r = router(&[
            ("*.example.com", 1),
            ("*.a.example.com", 2),
            ("api.a.example.com", 3),
        ]);
        assert_eq!(r.lookup("api.a.example.com"), Some(3));
        assert_eq!(r.lookup("web.a.example.com"), Some(2));
        assert_eq!(r.lookup("deep.web.a.example.com"), Some(2));
        assert_eq!(r.lookup("a.example.com"), Some(1));
        assert_eq!(r.lookup("b.example.com"), Some(1));
        assert_eq!(r.lookup("example.com"), None);
        assert_eq!(r.lookup("other.org"), None);
    }

    #[test]
    fn case_and_trailing_dot_are_ignored() {
        let r = router(&[("Api.A.Example.com.", 7), ("*.Wild.ORG", 8)]);
        assert_eq!(r.lookup("API.a.example.COM"), Some(7));
        assert_eq!(r.lookup("api.a.example.com."), Some(7));
        assert_eq!(r.lookup("X.wild.org."), Some(8));
        assert_eq!(r.lookup("api.a.example.com.."), None);
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in ["", "**", "a*.b.com", "*.*.b.com", "a..b", "-x y", "*."] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
        let mut r = router(&[("a.com", 0)]);
        assert_eq!(r.insert(HostPattern::parse("A.COM").unwrap(), 1), Err(0));
    }

    #[test]
    fn a_lone_star_matches_what_nothing_else_does() {
        let mut r = router(&[("*", 1), ("*.a.com", 2), ("x.a.com", 3)]);
        assert_eq!(r.lookup("x.a.com"), Some(3));
        assert_eq!(r.lookup("y.a.com"), Some(2));
        assert_eq!(r.lookup("a.com"), Some(1));
        assert_eq!(r.lookup("other.org"), Some(1));
        assert_eq!(r.insert(HostPattern::Any, 9), Err(1));
        assert_eq!(router(&[("*", 4)]).lookup("anything"), Some(4));
    }

    #[test]
    fn ten_thousand_routes_resolve_by_name() {
        let mut r = SniRouter::default();
        for i in 0..10_000 {
            r.insert(
                HostPattern::parse(&format!("api.c{i}.example.com")).unwrap(),
                i,
            )
            .unwrap();
            r.insert(HostPattern::parse(&format!("*.c{i}.internal")).unwrap(), i)
                .unwrap();
        }
        assert_eq!(r.lookup("api.c9999.example.com"), Some(9999));
        assert_eq!(r.lookup("x.y.c4242.internal"), Some(4242));
        assert_eq!(r.lookup("api.c10000.example.com"), None);
    }
}
