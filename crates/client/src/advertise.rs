//! The server side: the `Alt-Svc` value an API server (or a proxy in front
//! of it) sends so that clients learn its ready endpoints. Rendering is
//! `apiway_wire::altsvc`'s; this decides what to list.

use std::net::IpAddr;
use std::time::Duration;

use apiway_core::endpoint::{Address, Host};
use apiway_wire::altsvc::{AltSvc, Alternative};

/// One endpoint the server knows, with its readiness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdvertisedEndpoint {
    /// Where clients reach it.
    pub address: Address,
    /// Whether it is ready (its `/readyz` answers 200); only ready ones are
    /// listed.
    pub ready: bool,
}

/// The `Alt-Svc` value for a response to a client at `client`: every
/// ready endpoint that `reachable(client, endpoint)` allows, as `h2`, with
/// `ma` = `max_age` in whole seconds; `clear` when none is left, so
/// clients drop what they learned before.
///
/// `reachable` is the filter by the client's source network (advertise an
/// endpoint only to clients that can reach it, e.g. by CIDR); pass
/// `|_, _| true` to list every ready endpoint to everyone.
pub fn alt_svc_value(
    endpoints: &[AdvertisedEndpoint],
    client: IpAddr,
    max_age: Duration,
    reachable: impl Fn(IpAddr, &Address) -> bool,
) -> String {
    let ma = u32::try_from(max_age.as_secs()).unwrap_or(u32::MAX);
    let alternatives: Vec<Alternative> = endpoints
        .iter()
        .filter(|e| e.ready && reachable(client, &e.address))
        .map(|e| {
            let host = match &e.address.host {
                Host::Ip(ip) => ip.to_string(),
                Host::Name(name) => name.clone(),
            };
            Alternative {
                max_age: ma,
                ..Alternative::new("h2", Some(host), e.address.port)
            }
        })
        .collect();
    if alternatives.is_empty() {
        AltSvc::Clear.render()
    } else {
        AltSvc::Alternatives(alternatives).render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(text: &str, ready: bool) -> AdvertisedEndpoint {
        AdvertisedEndpoint {
            address: Address::parse(text).expect("address"),
            ready,
        }
    }

    #[test]
    fn lists_ready_reachable_endpoints_or_clear() {
        let endpoints = [
            ep("10.0.0.1:6443", true),
            ep("10.0.0.2:6443", false),
            ep("[fd00::3]:6443", true),
            ep("api-4.example:6443", true),
        ];
        let all = |_: IpAddr, _: &Address| true;
        let client: IpAddr = "10.1.0.9".parse().expect("ip");
        let value = alt_svc_value(&endpoints, client, Duration::from_secs(60), all);
        assert_eq!(
            value,
            r#"h2="10.0.0.1:6443"; ma=60, h2="[fd00::3]:6443"; ma=60, h2="api-4.example:6443"; ma=60"#
        );
        // What a client parses back is what was listed.
        let parsed = apiway_wire::altsvc::parse(&value).expect("parses");
        let AltSvc::Alternatives(alternatives) = parsed else {
            panic!("alternatives expected");
        };
        assert_eq!(alternatives.len(), 3);

        // Only IPv4 endpoints for an IPv4 client.
        let same_family =
            |c: IpAddr, a: &Address| matches!(a.host, Host::Ip(ip) if ip.is_ipv4() == c.is_ipv4());
        let value = alt_svc_value(&endpoints, client, Duration::from_secs(60), same_family);
        assert_eq!(value, r#"h2="10.0.0.1:6443"; ma=60"#);

        let none = alt_svc_value(&endpoints[1..2], client, Duration::from_secs(60), all);
        assert_eq!(none, "clear");
    }
}
