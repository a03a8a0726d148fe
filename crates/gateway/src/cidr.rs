//! The senders whose PROXY headers are believed, as networks in CIDR
//! notation ([`Cidr`] lives in core, shared with the client's `Alt-Svc`
//! filters).

use std::net::IpAddr;

pub use apiway_core::cidr::Cidr;

/// The senders whose PROXY headers are believed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedSources(Vec<Cidr>);

impl TrustedSources {
    /// Trusts the given networks.
    pub fn new(networks: Vec<Cidr>) -> TrustedSources {
        TrustedSources(networks)
    }

    /// Whether `addr` is in one of the networks. Lists are short (a load
    /// balancer subnet, the node network), so a scan is the fastest lookup.
    pub fn contains(&self, addr: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(addr))
    }

    /// Whether no network is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn trusted_sources_contain_their_networks() {
        let trusted = TrustedSources::new(vec![
            Cidr::parse("10.0.0.0/8").unwrap(),
            Cidr::parse("::1").unwrap(),
        ]);
        assert!(trusted.contains(ip("10.1.1.1")) && trusted.contains(ip("::1")));
        assert!(!trusted.contains(ip("127.0.0.1")));
        assert!(TrustedSources::default().is_empty());
    }
}
