//! `apiway bootstrap dns --stage N`: the DNS records of each bootstrap
//! stage of the "Kubernetes Service owned API load balancers" proposal, as
//! zone-file lines, so an installer scripts its DNS steps:
//!
//! | stage | public zone | private zone |
//! |---|---|---|
//! | 1, bootstrapping | `api` → public LB | `api`, `api-int` → bootstrap host + private LB |
//! | 2, bootstrapping complete | as stage 1 (clients ride out the dead bootstrap address) | as stage 1 |
//! | 3, bootstrap host removed | `api` → public LB | `api`, `api-int` → private LB |
//!
//! The load-balancer addresses are the reserved ones the Services were
//! rendered with; until the cloud has programmed them, round-robin DNS
//! sends some connections to an address that does not answer yet.

use std::net::IpAddr;

/// What the records are built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsInput {
    /// 1, 2 or 3.
    pub stage: u8,
    /// The cluster's domain (`mycluster.example.com`): records are
    /// `api.<domain>` and `api-int.<domain>`.
    pub domain: String,
    /// The bootstrap host's private addresses.
    pub bootstrap: Vec<IpAddr>,
    /// The reserved public load-balancer addresses (none: an internal-only
    /// cluster has no public zone records).
    pub public_lb: Vec<IpAddr>,
    /// The reserved private load-balancer addresses.
    pub private_lb: Vec<IpAddr>,
    /// Record TTL in seconds.
    pub ttl: u32,
}

/// One zone-file record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// `public` or `private`.
    pub zone: &'static str,
    /// Fully qualified, with the trailing dot.
    pub name: String,
    /// `A` or `AAAA`.
    pub kind: &'static str,
    /// The address.
    pub address: IpAddr,
    /// TTL.
    pub ttl: u32,
}

impl Record {
    /// The zone-file line: `api.example.com. 30 IN A 192.0.2.10`.
    pub fn line(&self) -> String {
        format!(
            "{} {} IN {} {}",
            self.name, self.ttl, self.kind, self.address
        )
    }
}

/// Checks the input; one line per problem.
pub fn validate(input: &DnsInput) -> Vec<String> {
    let mut problems = Vec::new();
    if !(1..=3).contains(&input.stage) {
        problems.push(format!("--stage {}: must be 1, 2 or 3", input.stage));
    }
    let domain = input.domain.trim_end_matches('.');
    let valid_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if domain.is_empty() || domain.len() > 240 || !domain.split('.').all(valid_label) {
        problems.push(format!(
            "--domain {:?}: not a DNS name (write mycluster.example.com)",
            input.domain
        ));
    }
    if input.private_lb.is_empty() {
        problems.push("--private-lb-ip: at least one reserved private load-balancer address is needed (api-int always points at it)".into());
    }
    if input.stage < 3 && input.bootstrap.is_empty() {
        problems.push(format!(
            "--bootstrap-ip: stage {} lists the bootstrap host, give its address",
            input.stage
        ));
    }
    for ip in &input.public_lb {
        if is_private(ip) {
            problems.push(format!(
                "--public-lb-ip {ip}: a private address cannot be the public load balancer's"
            ));
        }
    }
    problems
}

fn is_private(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_private() || v4.is_loopback() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00 // unique local
        }
    }
}

/// The records of the input's stage, public zone first; the input must
/// have passed [`validate`].
pub fn records(input: &DnsInput) -> Vec<Record> {
    let domain = input.domain.trim_end_matches('.');
    let mut out = Vec::new();
    let mut add = |zone: &'static str, host: &str, addresses: &[IpAddr]| {
        for address in addresses {
            let record = Record {
                zone,
                name: format!("{host}.{domain}."),
                kind: if address.is_ipv4() { "A" } else { "AAAA" },
                address: *address,
                ttl: input.ttl,
            };
            if !out.contains(&record) {
                out.push(record);
            }
        }
    };
    add("public", "api", &input.public_lb);
    let private: Vec<IpAddr> = if input.stage < 3 {
        input
            .bootstrap
            .iter()
            .chain(&input.private_lb)
            .copied()
            .collect()
    } else {
        input.private_lb.clone()
    };
    add("private", "api", &private);
    add("private", "api-int", &private);
    out
}

/// The stage's records as text: a comment per zone, then its lines.
pub fn render(input: &DnsInput) -> String {
    let records = records(input);
    let mut out = format!(
        "; apiway bootstrap dns --stage {}: {}\n",
        input.stage,
        match input.stage {
            1 => "bootstrapping (bootstrap host and reserved load-balancer addresses)",
            2 => "bootstrapping complete (unchanged: clients ride out the bootstrap address)",
            _ => "bootstrap host removed (load-balancer addresses only)",
        }
    );
    for zone in ["public", "private"] {
        let lines: Vec<String> = records
            .iter()
            .filter(|r| r.zone == zone)
            .map(Record::line)
            .collect();
        if lines.is_empty() {
            continue;
        }
        out.push_str(&format!("; {zone} zone\n"));
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(stage: u8) -> DnsInput {
        DnsInput {
            stage,
            domain: "c1.example.com".into(),
            bootstrap: vec!["10.0.0.5".parse().unwrap()],
            public_lb: vec![
                "203.0.113.10".parse().unwrap(),
                "2001:db8::10".parse().unwrap(),
            ],
            private_lb: vec!["10.0.0.100".parse().unwrap()],
            ttl: 30,
        }
    }

    #[test]
    fn the_three_stages() {
        let one = render(&input(1));
        assert!(one.contains("api.c1.example.com. 30 IN A 203.0.113.10\n"));
        assert!(one.contains("api.c1.example.com. 30 IN AAAA 2001:db8::10\n"));
        assert!(one.contains("api-int.c1.example.com. 30 IN A 10.0.0.5\napi-int.c1.example.com. 30 IN A 10.0.0.100\n"));
        assert_eq!(records(&input(1)), records(&input(2)));
        let three = records(&input(3));
        assert!(three.iter().all(|r| r.address.to_string() != "10.0.0.5"));
        assert_eq!(
            three
                .iter()
                .filter(|r| r.name.starts_with("api-int"))
                .count(),
            1
        );
    }

    #[test]
    fn problems_one_line_each() {
        let mut bad = input(4);
        bad.domain = "bad domain".into();
        bad.bootstrap.clear();
        bad.private_lb.clear();
        bad.public_lb.push("10.1.1.1".parse().unwrap());
        let problems = validate(&bad);
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(problems.iter().all(|p| !p.contains('\n')));
        assert!(validate(&input(3)).is_empty());
        let mut three = input(3);
        three.bootstrap.clear();
        assert!(
            validate(&three).is_empty(),
            "stage 3 needs no bootstrap host"
        );
    }
}
