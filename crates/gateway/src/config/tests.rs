use super::*;

/// The YAML block of the README's gateway "Configuration" section, so
/// the documented example is the tested one.
fn readme_example() -> String {
    // Read at run time: the README lies outside the crate.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
    let readme = std::fs::read_to_string(path).expect("the workspace README");
    let section = readme
        .split_once("### Configuration")
        .expect("the README has a Configuration section")
        .1;
    let block = section
        .split_once("```yaml\n")
        .expect("with a YAML block")
        .1;
    block.split_once("```").expect("that ends").0.to_owned()
}

#[test]
fn the_documented_example_parses() {
    let s = parse(&readme_example()).unwrap();
    assert_eq!(s.common.admin, Some("127.0.0.1:9901".parse().unwrap()));
    assert_eq!(s.listeners[0].address, "127.0.0.1:8443".parse().unwrap());
    assert_eq!(s.listeners[0].client_hello_timeout, Duration::from_secs(10));
    assert_eq!(s.routes[0].groups[0].endpoints.endpoints.len(), 2);
    let hc = s.routes[0].groups[0]
        .endpoints
        .health_check
        .as_ref()
        .unwrap();
    assert_eq!(hc.interval, Duration::from_secs(1));
    assert_eq!(s.router.lookup("API.A.example.com."), Some(0));
    assert_eq!(s.router.lookup("x.a.internal.example.com"), Some(0));
    assert_eq!(s.default_route, None);
    assert_eq!(s.listeners[1].kind, ListenerKind::Proxy);
    assert_eq!(s.listeners[2].kind, ListenerKind::Connect);
    assert_eq!(s.destinations.len(), 1);
    assert_eq!(s.authorities.len(), 1);
}

fn err(text: &str) -> String {
    parse(text).unwrap_err()
}

#[test]
fn errors_name_the_problem() {
    let base = "listeners: [{name: l, address: 127.0.0.1:1, kind: tls}]\n";
    assert!(err("listeners: [").starts_with("invalid YAML"));
    assert!(err("listeners: []").contains("at least one listener"));
    assert!(err("listeners: [{name: l, address: nowhere, kind: tls}]")
        .contains("listeners[0] (l).address: `nowhere` is not an ip:port"));
    assert!(
        err("listeners: [{name: l, address: 127.0.0.1:1, kind: udp}]")
            .starts_with("invalid configuration")
    );
    assert!(err(&format!("{base}bogus: 1")).starts_with("invalid configuration"));
    assert!(err(&format!("{base}default_route: nope"))
        .contains("default_route: no route is named `nope`"));
    let r = |extra: &str| {
        format!("{base}routes:\n  - name: a\n    hostnames: [a.example.com]\n    backends: [{{address: 127.0.0.1:7}}]\n{extra}")
    };
    assert!(parse(&r("")).is_ok());
    assert!(err(&r(
        "  - name: b\n    hostnames: [A.example.com]\n    backends: [{address: 127.0.0.1:8}]\n"
    ))
    .contains("routes[1] (b).hostnames[0]: `A.example.com` is already routed to a"));
    assert!(
        err(&r("  - name: a\n    backends: [{address: 127.0.0.1:8}]\n"))
            .contains("routes[1] (a): the name is used by another route")
    );
    assert!(err(&r(
        "  - name: c\n    hostnames: ['a*.x']\n    backends: [{address: 127.0.0.1:8}]\n"
    ))
    .contains("routes[1] (c).hostnames[0]"));
    assert!(
        err(&r("  - name: c\n    backends: [{address: 'nohost'}]\n"))
            .contains("routes[1] (c).backends[0].address: `nohost` has no port")
    );
    assert!(err(&r("  - name: c\n    backends: []\n")).contains("at least one backend"));
    assert!(err(&r("  - name: c\n    backends: [{address: 127.0.0.1:8}]\n    health_check: {kind: https, ca_file: /nonexistent/ca.pem}\n"))
            .contains("routes[1] (c).health_check.ca_file: /nonexistent/ca.pem"));
    assert!(err(&r("  - name: c\n    backends: [{address: 127.0.0.1:8}]\n    health_check: {kind: tcp, interval: 1x}\n"))
            .contains("1x"));
}

const IN_CLUSTER: &str = r#"
listeners:
  - name: in-cluster
    address: 127.0.0.1:8444
    kind: proxy
    trusted_sources: ["127.0.0.0/8", "10.0.0.0/8"]
routes:
  - name: cluster-a
    hostnames: ["api.a.example.com"]
    destinations: ["10.1.2.3:443"]
    backends: [{ address: 127.0.0.1:7001 }]
"#;

#[test]
fn the_in_cluster_example_parses() {
    let s = parse(IN_CLUSTER).unwrap();
    let l = &s.listeners[0];
    assert_eq!(l.kind, ListenerKind::Proxy);
    assert_eq!(l.proxy_protocol, ProxyProtocolMode::Required);
    assert_eq!(l.proxy_header_timeout, Duration::from_secs(3));
    assert!(l.trusted_sources.contains("10.9.8.7".parse().unwrap()));
    assert!(!l.trusted_sources.contains("192.168.0.1".parse().unwrap()));
    assert_eq!(
        s.destinations.get(&"10.1.2.3:443".parse().unwrap()),
        Some(&0)
    );
    assert_eq!(
        s.destinations
            .get(&destination_key("[::ffff:10.1.2.3]:443".parse().unwrap())),
        Some(&0)
    );
}

#[test]
fn new_kinds_check_their_fields() {
    let one = |listener: &str, route: &str| {
        parse(&format!(
                "listeners: [{listener}]\nroutes:\n  - name: a\n    backends: [{{address: 127.0.0.1:7}}]\n{route}"
            ))
    };
    let proxy = "{name: p, address: 127.0.0.1:1, kind: proxy, trusted_sources: [10.0.0.0/8]}";
    assert!(one(proxy, "").is_ok());
    assert!(one("{name: p, address: 127.0.0.1:1, kind: proxy}", "")
        .unwrap_err()
        .contains("listeners[0] (p).trusted_sources: list the networks"));
    assert!(one(
        "{name: p, address: 127.0.0.1:1, kind: proxy, trusted_sources: [10.0.0.1/8]}",
        ""
    )
    .unwrap_err()
    .contains(
        "listeners[0] (p).trusted_sources[0]: `10.0.0.1/8` has host bits set (write 10.0.0.0/8)"
    ));
    assert!(one("{name: p, address: 127.0.0.1:1, kind: proxy, proxy_protocol: required, trusted_sources: [10.0.0.0/8]}", "")
            .unwrap_err()
            .contains("always requires the header"));
    assert!(one("{name: p, address: 127.0.0.1:1, kind: proxy, client_hello_timeout: 1s, trusted_sources: [10.0.0.0/8]}", "")
            .unwrap_err()
            .contains("client_hello_timeout applies to kind: tls only"));
    assert!(one(
        "{name: t, address: 127.0.0.1:1, kind: tls, trusted_sources: [10.0.0.0/8]}",
        ""
    )
    .unwrap_err()
    .contains("set proxy_protocol: optional or required"));
    let s = one("{name: t, address: 127.0.0.1:1, kind: tls, proxy_protocol: optional, trusted_sources: [10.0.0.0/8], proxy_header_timeout: 500ms}", "").unwrap();
    assert_eq!(s.listeners[0].proxy_protocol, ProxyProtocolMode::Optional);
    assert_eq!(
        s.listeners[0].proxy_header_timeout,
        Duration::from_millis(500)
    );
    let s = one(
        "{name: c, address: 127.0.0.1:1, kind: connect, request_timeout: 2s}",
        "    connect_authorities: [API.A.example.com:443]\n    send_proxy_protocol: v2\n",
    )
    .unwrap();
    assert_eq!(s.listeners[0].max_request_bytes, 8192);
    assert_eq!(s.routes[0].send_proxy_protocol, Some(SendProxyProtocol::V2));
    assert_eq!(
        s.authorities
            .get(&Authority::parse("api.a.example.com:443").unwrap()),
        Some(&0)
    );
    assert!(one(
        "{name: c, address: 127.0.0.1:1, kind: connect, trusted_sources: [10.0.0.0/8]}",
        ""
    )
    .unwrap_err()
    .contains("reads no PROXY header"));
    assert!(one(
        "{name: c, address: 127.0.0.1:1, kind: connect, max_request_bytes: 10}",
        ""
    )
    .unwrap_err()
    .contains("max_request_bytes must be between 256 and 65536"));
    assert!(one(proxy, "    connect_authorities: [api.a.example.com]\n")
        .unwrap_err()
        .contains("routes[0] (a).connect_authorities[0]: `api.a.example.com` is not host:port"));
    assert!(one(proxy, "    destinations: [10.1.2.3]\n")
        .unwrap_err()
        .contains("routes[0] (a).destinations[0]: `10.1.2.3` is not an ip:port"));
    assert!(one(proxy, "    send_proxy_protocol: v3\n")
        .unwrap_err()
        .starts_with("invalid configuration"));
    let two = |field: &str, a: &str, b: &str| {
        parse(&format!(
                "listeners: [{proxy}]\nroutes:\n  - name: a\n    {field}: [{a}]\n    backends: [{{address: 127.0.0.1:7}}]\n  - name: b\n    {field}: [{b}]\n    backends: [{{address: 127.0.0.1:8}}]\n"
            ))
    };
    assert!(two("destinations", "10.1.2.3:443", "10.1.2.3:443")
        .unwrap_err()
        .contains("routes[1] (b).destinations[0]: 10.1.2.3:443 is already routed to a"));
    assert!(
        two("connect_authorities", "x.example:443", "X.Example.:443")
            .unwrap_err()
            .contains(
                "routes[1] (b).connect_authorities[0]: `X.Example.:443` is already routed to a"
            )
    );
    assert!(two("destinations", "10.1.2.3:443", "10.1.2.3:6443").is_ok());
}

/// Two sources (a file and, later, Kubernetes) merge into one spec: their
/// routes add up and are validated together; a shared setting may come
/// from one of them only.
#[test]
fn specs_from_two_sources_merge_and_validate_together() {
    use apiway_core::config::source::Merge;
    let file = decode(
        "admin: {address: 127.0.0.1:0}\nlisteners: [{name: l, address: 127.0.0.1:0, kind: tls}]\nroutes:\n  - name: a\n    hostnames: [a.example.com]\n    backends: [{address: 127.0.0.1:7}]\n",
    )
    .unwrap();
    let other = decode(
        "listeners: []\nroutes:\n  - name: b\n    hostnames: [b.example.com]\n    backends: [{address: 127.0.0.1:8}]\n",
    )
    .unwrap();
    let merged = file.clone().merge(other.clone()).unwrap();
    let s = validate(merged).unwrap();
    assert_eq!(s.routes.len(), 2);
    assert_eq!(s.router.lookup("b.example.com"), Some(1));

    // The same hostname from both: found by the one validation.
    let clash = decode(
        "listeners: []\nroutes:\n  - name: c\n    hostnames: [A.example.com]\n    backends: [{address: 127.0.0.1:9}]\n",
    )
    .unwrap();
    assert!(validate(file.clone().merge(clash).unwrap())
        .unwrap_err()
        .contains("routes[1] (c).hostnames[0]: `A.example.com` is already routed to a"));

    // A shared setting from two sources that disagree is a conflict.
    let admin = decode("admin: {address: 127.0.0.1:1}\nlisteners: []\n").unwrap();
    assert!(file
        .merge(admin)
        .unwrap_err()
        .contains("admin.address is set by two configuration sources"));
}

#[test]
fn max_routes_refuses_a_flood_whole() {
    let routes = |n: usize| {
        let mut text = String::from(
            "listeners: [{name: l, address: 127.0.0.1:1, kind: tls}]\nmax_routes: 2\nroutes:\n",
        );
        for i in 0..n {
            text.push_str(&format!(
                "  - {{name: r{i}, hostnames: [r{i}.example.com], backends: [{{address: 127.0.0.1:7}}]}}\n"
            ));
        }
        text
    };
    assert!(parse(&routes(2)).is_ok());
    let e = err(&routes(3));
    assert!(
        e.contains("too many routes: 3, more than max_routes (2)"),
        "{e}"
    );
}
