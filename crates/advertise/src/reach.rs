//! Which clients can reach which endpoints, by network.

use std::fmt;
use std::net::IpAddr;

use apiway_core::cidr::Cidr;
use apiway_core::endpoint::{Address, Host};

/// One rule: clients in [`clients`](Self::clients) reach endpoints in
/// [`endpoints`](Self::endpoints). Written `CLIENT_CIDR=ENDPOINT_CIDR`,
/// e.g. `10.1.0.0/16=10.0.0.0/24`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReachabilityRule {
    /// The client source network the rule applies to.
    pub clients: Cidr,
    /// The endpoints those clients can reach.
    pub endpoints: Cidr,
}

impl ReachabilityRule {
    /// Parses `CLIENT_CIDR=ENDPOINT_CIDR`; the error says what to write.
    pub fn parse(text: &str) -> Result<ReachabilityRule, String> {
        let (clients, endpoints) = text.split_once('=').ok_or_else(|| {
            format!("`{text}` is not a rule (write CLIENT_CIDR=ENDPOINT_CIDR, e.g. 10.1.0.0/16=10.0.0.0/24)")
        })?;
        Ok(ReachabilityRule {
            clients: Cidr::parse(clients.trim()).map_err(|e| format!("`{text}`: clients: {e}"))?,
            endpoints: Cidr::parse(endpoints.trim())
                .map_err(|e| format!("`{text}`: endpoints: {e}"))?,
        })
    }
}

impl fmt::Display for ReachabilityRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.clients, self.endpoints)
    }
}

/// The filter by client source network: which advertised endpoints a
/// client may be told about.
///
/// - No rules (the default): every client reaches every endpoint.
/// - With rules, a client reaches an endpoint when some rule has the client
///   in its `clients` and the endpoint in its `endpoints`. A client that
///   matches no rule reaches nothing and so gets `Alt-Svc: clear`: the rules
///   describe the networks the operator knows, and for a client from
///   anywhere else the safe answer is to keep using the origin (the load
///   balancer), which it evidently reaches, and to drop any alternatives it
///   learned before.
/// - An endpoint given by DNS name matches no rule (its network is not
///   known without resolving it), so with rules it is never advertised.
/// - An IPv4-mapped IPv6 address (`::ffff:10.1.2.3`, what a dual-stack
///   socket reports for an IPv4 peer) counts as the IPv4 address, for
///   clients and endpoints alike.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reachability {
    rules: Vec<ReachabilityRule>,
}

impl Reachability {
    /// Every client reaches every endpoint.
    pub fn everyone() -> Reachability {
        Reachability::default()
    }

    /// Clients reach what `rules` allow (none: everything).
    pub fn new(rules: Vec<ReachabilityRule>) -> Reachability {
        Reachability { rules }
    }

    /// The rules.
    pub fn rules(&self) -> &[ReachabilityRule] {
        &self.rules
    }

    /// Whether a client at `client` reaches `endpoint`. `None` is a client
    /// whose address is unknown: it matches no rule.
    pub fn reaches(&self, client: Option<IpAddr>, endpoint: &Address) -> bool {
        if self.rules.is_empty() {
            return true;
        }
        let (Some(client), Host::Ip(endpoint)) = (client, &endpoint.host) else {
            return false;
        };
        let (client, endpoint) = (client.to_canonical(), endpoint.to_canonical());
        self.rules
            .iter()
            .any(|rule| rule.clients.contains(client) && rule.endpoints.contains(endpoint))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> ReachabilityRule {
        ReachabilityRule::parse(text).expect("rule")
    }

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().expect("ip"))
    }

    fn address(text: &str) -> Address {
        Address::parse(text).expect("address")
    }

    #[test]
    fn rules_parse_and_print_back() {
        let r = rule("10.1.0.0/16=10.0.0.0/24");
        assert_eq!(r.to_string(), "10.1.0.0/16=10.0.0.0/24");
        assert_eq!(
            rule(" fd00::/8 = 127.0.0.5 ").to_string(),
            "fd00::/8=127.0.0.5/32"
        );
        for (bad, says) in [
            ("10.1.0.0/16", "CLIENT_CIDR=ENDPOINT_CIDR"),
            (
                "10.1.0.1/16=10.0.0.0/24",
                "clients: `10.1.0.1/16` has host bits set",
            ),
            ("10.1.0.0/16=x", "endpoints: `x` is not a network"),
            ("=", "clients"),
        ] {
            let error = ReachabilityRule::parse(bad).expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn no_rules_reach_everything_rules_reach_what_they_say() {
        let anywhere = Reachability::everyone();
        assert!(anywhere.reaches(ip("192.0.2.1"), &address("10.0.0.1:6443")));
        assert!(anywhere.reaches(None, &address("api.example:6443")));

        let rules = Reachability::new(vec![
            rule("10.1.0.0/16=10.0.0.0/24"),
            rule("10.2.0.0/16=10.0.1.0/24"),
            rule("10.2.0.0/16=fd00::/64"),
        ]);
        let inside = address("10.0.0.7:6443");
        let other = address("10.0.1.7:6443");
        let v6 = address("[fd00::7]:6443");
        assert!(rules.reaches(ip("10.1.3.4"), &inside));
        assert!(!rules.reaches(ip("10.1.3.4"), &other));
        assert!(!rules.reaches(ip("10.1.3.4"), &v6));
        assert!(rules.reaches(ip("10.2.3.4"), &other) && rules.reaches(ip("10.2.3.4"), &v6));
        assert!(!rules.reaches(ip("10.2.3.4"), &inside));
        // A client no rule names, an unknown client, a named endpoint.
        assert!(!rules.reaches(ip("192.0.2.1"), &inside));
        assert!(!rules.reaches(None, &inside));
        assert!(!rules.reaches(ip("10.1.3.4"), &address("api.example:6443")));
    }

    #[test]
    fn ipv4_mapped_addresses_count_as_ipv4() {
        let rules = Reachability::new(vec![rule("10.1.0.0/16=10.0.0.0/24")]);
        let inside = address("10.0.0.7:6443");
        assert!(rules.reaches(ip("::ffff:10.1.3.4"), &inside));
        assert!(rules.reaches(ip("10.1.3.4"), &address("[::ffff:10.0.0.7]:6443")));
        assert!(!rules.reaches(ip("::ffff:10.9.3.4"), &inside));
        // A mapped address is not in an IPv6 network that would hold it
        // literally: it is an IPv4 client.
        let v6_rules = Reachability::new(vec![rule("::ffff:0:0/96=10.0.0.0/24")]);
        assert!(!v6_rules.reaches(ip("::ffff:10.1.3.4"), &inside));
    }
}
