//! Alternatives learned from `Alt-Svc` response headers. The header is
//! parsed by `apiway_wire::altsvc`; this turns the result into listed
//! endpoints with an expiry.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use apiway_core::endpoint::choice::Listed;
use apiway_core::endpoint::{is_local_ip, Address, Host};
use apiway_wire::altsvc::{self, AltSvc};
use http::header::ALT_SVC;
use http::HeaderMap;

/// What one response said about the origin's alternatives.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Learned {
    /// No `Alt-Svc` header, or one that does not parse: keep what is cached.
    Nothing,
    /// Replace the learned alternatives with these (empty for `clear`, or
    /// when no alternative speaks `h2`).
    Replace(Vec<Listed<Address>>),
}

/// Reads the `Alt-Svc` field lines of a response received at `now`.
/// `origin` fills in an empty alt-authority host; each alternative expires
/// after min(`ma` less the response's `Age`, `max_age`) (RFC 7838 section
/// 3.1). `known` gives the locality of addresses seen
/// before, so an unchanged list costs no interface lookups.
pub(crate) fn from_headers(
    headers: &HeaderMap,
    origin: &Address,
    now: Instant,
    max_age: Duration,
    known: &dyn Fn(&Address) -> Option<bool>,
) -> Learned {
    let mut lines = Vec::new();
    for value in headers.get_all(ALT_SVC) {
        match value.to_str() {
            Ok(line) => lines.push(line),
            Err(_) => {
                tracing::debug!("Alt-Svc header is not ASCII; ignored");
                return Learned::Nothing;
            }
        }
    }
    if lines.is_empty() {
        return Learned::Nothing;
    }
    let alternatives = match altsvc::parse_lines(lines) {
        Ok(AltSvc::Clear) => return Learned::Replace(Vec::new()),
        Ok(AltSvc::Alternatives(alternatives)) => alternatives,
        Err(e) => {
            tracing::debug!("Alt-Svc header ignored: {e}");
            return Learned::Nothing;
        }
    };
    // A cache in between may have held the response: `ma` counts from when
    // it was generated. An `Age` that does not parse is ignored.
    let age = headers
        .get(http::header::AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    let mut listed: Vec<Listed<Address>> = Vec::new();
    // Only HTTP/2 over TLS: the client speaks nothing else.
    for alternative in alternatives.iter().filter(|a| a.is_h2()) {
        let address = match &alternative.host {
            None => Address {
                host: origin.host.clone(),
                port: alternative.port,
            },
            Some(host) => match host.parse::<IpAddr>() {
                Ok(ip) => Address {
                    host: Host::Ip(ip),
                    port: alternative.port,
                },
                Err(_) => match Address::parse(&format!("{host}:{}", alternative.port)) {
                    Ok(address) => address,
                    Err(e) => {
                        tracing::debug!("Alt-Svc alternative skipped: {e}");
                        continue;
                    }
                },
            },
        };
        if listed.iter().any(|l| l.key == address) {
            continue;
        }
        let local = known(&address).unwrap_or_else(|| match address.host {
            Host::Ip(ip) => is_local_ip(ip),
            Host::Name(_) => false,
        });
        let ttl = alternative
            .max_age_duration()
            .saturating_sub(age)
            .min(max_age);
        listed.push(Listed::new(address, local).expires(now + ttl));
    }
    Learned::Replace(listed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(ALT_SVC, HeaderValue::from_str(l).expect("ascii"));
        }
        h
    }

    fn learn(lines: &[&str], now: Instant) -> Learned {
        let origin = Address::parse("api.example:6443").expect("origin");
        from_headers(
            &headers(lines),
            &origin,
            now,
            Duration::from_secs(70),
            &|_| None,
        )
    }

    #[test]
    fn keeps_h2_alternatives_with_capped_expiry() {
        let now = Instant::now();
        let Learned::Replace(listed) = learn(
            &[
                r#"h2="10.9.0.1:6443"; ma=30, h3="10.9.0.2:6443""#,
                r#"h2=":7443", h2="[fd00::5]:6443", h2="127.0.0.1:6443""#,
            ],
            now,
        ) else {
            panic!("expected alternatives");
        };
        let shown: Vec<(String, bool, Option<Instant>)> = listed
            .iter()
            .map(|l| (l.key.to_string(), l.local, l.expires_at))
            .collect();
        let cap = Some(now + Duration::from_secs(70));
        assert_eq!(
            shown,
            [
                (
                    "10.9.0.1:6443".into(),
                    false,
                    Some(now + Duration::from_secs(30))
                ),
                ("api.example:7443".into(), false, cap),
                ("[fd00::5]:6443".into(), false, cap),
                ("127.0.0.1:6443".into(), true, cap),
            ]
        );
    }

    #[test]
    fn age_shortens_the_freshness() {
        let now = Instant::now();
        let origin = Address::parse("api.example:6443").expect("origin");
        let mut h = headers(&[r#"h2="10.0.0.1:6443"; ma=30, h2="10.0.0.2:6443"; ma=5"#]);
        h.insert(http::header::AGE, HeaderValue::from_static("10"));
        let Learned::Replace(listed) =
            from_headers(&h, &origin, now, Duration::from_secs(70), &|_| None)
        else {
            panic!("expected alternatives");
        };
        let expiries: Vec<Option<Instant>> = listed.iter().map(|l| l.expires_at).collect();
        assert_eq!(
            expiries,
            [Some(now + Duration::from_secs(20)), Some(now)],
            "an alternative older than its ma is stale at once"
        );
    }

    #[test]
    fn clear_absent_and_malformed() {
        let now = Instant::now();
        assert_eq!(learn(&["clear"], now), Learned::Replace(Vec::new()));
        assert_eq!(learn(&[], now), Learned::Nothing);
        assert_eq!(learn(&[r#"h2="10.0.0.1""#], now), Learned::Nothing);
        assert_eq!(learn(&[r#"h3=":443""#], now), Learned::Replace(Vec::new()));
    }
}
