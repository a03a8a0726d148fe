//! IP networks in CIDR notation: the gateway's `trusted_sources`, the
//! client address filters of `apiway_advertise`.

use std::fmt;
use std::net::IpAddr;

/// A network such as `10.0.0.0/8` or `fd00::/8`; a bare address is a
/// single host (`/32` or `/128`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ip/prefix` or `ip`. Host bits must be zero (`10.0.0.1/8` is
    /// refused, as it is most likely a typo); the error says what to write.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let network: IpAddr = addr.parse().map_err(|_| {
            format!("`{text}` is not a network (write 10.0.0.0/8, fd00::/8 or a single address)")
        })?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max && !p.starts_with('+') => n,
                _ => return Err(format!("`{text}`: the prefix length must be 0 to {max}")),
            },
        };
        let cidr = Cidr { network, prefix };
        if cidr.masked(network) != network {
            return Err(format!(
                "`{text}` has host bits set (write {}/{prefix})",
                cidr.masked(network)
            ));
        }
        Ok(cidr)
    }

    fn masked(&self, addr: IpAddr) -> IpAddr {
        match addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        }
    }

    /// Whether `addr` is in the network. An IPv4-mapped IPv6 address
    /// (`::ffff:10.0.0.1`, what a dual-stack socket reports for an IPv4
    /// peer) matches the IPv4 networks it maps to.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = match addr {
            IpAddr::V6(v6) if self.network.is_ipv4() => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            other => other,
        };
        addr.is_ipv4() == self.network.is_ipv4() && self.masked(addr) == self.network
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn networks_contain_their_addresses() {
        let ten = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(ten.contains(ip("10.255.1.2")));
        assert!(!ten.contains(ip("11.0.0.1")));
        assert!(ten.contains(ip("::ffff:10.1.2.3")), "v4-mapped peers");
        assert!(!ten.contains(ip("fd00::1")));
        let host = Cidr::parse("127.0.0.1").unwrap();
        assert!(host.contains(ip("127.0.0.1")) && !host.contains(ip("127.0.0.2")));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains(ip("1.2.3.4")) && !all.contains(ip("::1")));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        assert!(Cidr::parse("::/0").unwrap().contains(ip("::1")));
        assert_eq!(Cidr::parse("::1").unwrap().to_string(), "::1/128");
    }

    #[test]
    fn bad_networks_say_what_to_write() {
        assert!(Cidr::parse("10.0.0.1/8")
            .unwrap_err()
            .contains("write 10.0.0.0/8"));
        for bad in [
            "10.0.0.0/33",
            "fd00::/129",
            "10/8",
            "x",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
