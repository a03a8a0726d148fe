//! Cross-check against curl: a local HTTPS server (Python `http.server` over
//! `ssl`, with a self-signed certificate made by `openssl` for this run)
//! answers with chosen `Alt-Svc` field lines, `curl --alt-svc FILE` records
//! what it understood in its cache file, and the entries must match what
//! `apiway_wire::altsvc::parse_lines` returns for the protocol ids curl knows
//! (`h1`, `h2`, `h3`): protocol, host, port, expiry (within the time the
//! request took, plus a second for the file's whole-second dates) and persist.
//!
//! Where curl departs from RFC 7838 / RFC 9110 we follow the RFCs; each such
//! case lists the entries curl 7.88.1 writes, and the test accepts either
//! those or ours (a newer curl may have fixed the difference).
//!
//! Needs `curl` with the `alt-svc` feature, `openssl` and `python3`; a
//! missing one fails the test with a message saying so.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use apiway_wire::altsvc::{parse_lines, AltSvc};

/// The host curl connects to; alternatives without a host are on it.
const ORIGIN: &str = "127.0.0.1";

/// Stands for the origin's port in [`Expected`] entries.
const ORIGIN_PORT: u16 = 0;

/// Protocol ids curl keeps in its cache; it drops the others.
const CURL_PROTOCOLS: &[&str] = &["h1", "h2", "h3"];

/// One cache entry: protocol, host, port, max-age in seconds, persist.
type Expected = (&'static str, &'static str, u16, u64, bool);

struct Case {
    lines: &'static [&'static str],
    /// `None` when curl agrees with the RFC; else what curl 7.88.1 records
    /// and why it differs.
    curl_quirk: Option<(&'static [Expected], &'static str)>,
}

const fn agree(lines: &'static [&'static str]) -> Case {
    Case {
        lines,
        curl_quirk: None,
    }
}

const fn quirk(
    lines: &'static [&'static str],
    curl: &'static [Expected],
    why: &'static str,
) -> Case {
    Case {
        lines,
        curl_quirk: Some((curl, why)),
    }
}

const DAY: u64 = 86_400;

const CASES: &[Case] = &[
    // RFC 7838 examples.
    agree(&[r#"h2=":8000""#]),
    agree(&[r#"h2="new.example.org:80""#]),
    agree(&[r#"h3-29=":443"; ma=3600, h2=":443""#]),
    agree(&["clear"]),
    // Parameters.
    agree(&[r#"h2=":443"; ma=3600, h3=":444"; ma=60"#]),
    agree(&[r#"h2=":443"; persist=1; ma=120"#]),
    agree(&[r#"h2=":443"; persist=2"#]),
    agree(&[r#"h2=":443"; persist="1""#]),
    agree(&[r#"h2=":443"; persist=1; persist=0"#]),
    agree(&[r#"h2=":443"; ma=0"#]),
    agree(&[r#"h2=":443"; ma="100""#]),
    agree(&[r#"h2=":443"; MA=100"#]),
    agree(&[r#"h2=":443"; ma=100; ma=200"#]),
    agree(&[r#"h2=":443"; ma=abc"#]),
    agree(&[r#"h2=":443"; ma=-1"#]),
    agree(&[r#"h2=":443"; ma=100; ma=abc"#]),
    agree(&[r#"h2=":443"; foo=bar; ma=7"#]),
    agree(&[r#"h2=":443";"#]),
    agree(&[r#"h2=":443"   ;   ma=5"#]),
    // Authorities.
    agree(&[r#"h1="127.0.0.2:8080""#]),
    agree(&[r#"h2="EXAMPLE.com:443""#]),
    agree(&[r#"h2=":0443""#]),
    agree(&[r#"h2=":443", h2=":443""#]),
    // Rejected by both.
    agree(&[r#"h2=":0""#]),
    agree(&[r#"h2=":65536""#]),
    agree(&[r#"h2=:443"#]),
    agree(&[r#"h2=":443"#]),
    // Several field lines that curl reads the same way.
    agree(&[r#"h2=":443""#, ""]),
    // Where curl 7.88.1 and the RFCs differ.
    quirk(
        &[r#"h2="[::1]:443""#],
        &[],
        "curl 7.88.1 ignores IPv6 literal hosts",
    ),
    quirk(
        &[r#"h2="a_b.example:443""#],
        &[],
        "curl 7.88.1 ignores hosts with `_` (a valid reg-name character)",
    ),
    quirk(
        &[r#"h2="example.com""#],
        &[("h2", "example.com", ORIGIN_PORT, DAY, false)],
        "curl takes a missing port to be the origin's; RFC 7838 requires one",
    ),
    quirk(
        &[r#"h%32=":443""#],
        &[],
        "curl does not percent-decode protocol ids (`h%32` is `h2`)",
    ),
    quirk(
        &[r#"H2=":443""#],
        &[("h2", ORIGIN, 443, DAY, false)],
        "curl compares protocol ids ignoring case; ALPN ids are octets",
    ),
    quirk(
        &[r#"h2="ex\ample.com:443""#],
        &[],
        "curl does not undo quoted-pair escapes",
    ),
    quirk(
        &[r#", , h2=":443",,"#],
        &[],
        "curl drops a value that starts with empty list elements",
    ),
    quirk(
        &[r#"h2=":443"; foo="x,y"; ma=7, h3=":1""#],
        &[("h2", ORIGIN, 443, 7, false)],
        "curl splits at a `,` inside a quoted parameter value",
    ),
    quirk(
        &[r#"h2=":443", clear"#],
        &[("h2", ORIGIN, 443, DAY, false)],
        "curl accepts `clear` next to alternatives; the grammar allows it only alone",
    ),
    quirk(
        &[r#"h2=":443" bogus, h3=":5""#],
        &[("h2", ORIGIN, 443, DAY, false)],
        "curl keeps what it parsed before a syntax error; we reject the value",
    ),
    quirk(
        &[r#"h2=":443""#, r#"h3=":444""#],
        &[("h3", ORIGIN, 444, DAY, false)],
        "curl lets each field line replace the last; RFC 9110 joins them into one list",
    ),
    quirk(
        &["clear", r#"h2=":443""#],
        &[("h2", ORIGIN, 443, DAY, false)],
        "curl lets each field line replace the last, so `clear` + an alternative is not an error",
    ),
    quirk(
        &[r#"h2=":443"; ma=4294967296"#],
        &[("h2", ORIGIN, 443, 4_294_967_296, false)],
        "curl does not clamp ma to 2^31 as RFC 9111 section 1.2.2 asks",
    ),
];

/// A cache entry from either side, expiry in Unix seconds (a range for ours).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    alpn: String,
    host: String,
    port: u16,
    persist: bool,
    expires: (u64, u64),
}

#[test]
fn curl_reads_alt_svc_like_we_do() {
    require_curl_with_alt_svc();
    let dir = TempDir::new();
    let server = Server::start(&dir.0);
    // A few curls at a time: most of each run is process start-up.
    let workers = 4;
    let results: Vec<(usize, Vec<Entry>, (u64, u64))> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let (server, dir) = (&server, &dir);
                scope.spawn(move || {
                    let mut done = Vec::new();
                    for index in (worker..CASES.len()).step_by(workers) {
                        let cache = dir.0.join(format!("cache-{index}.txt"));
                        let before = unix_now();
                        let entries = fetch(server, CASES[index].lines, &cache);
                        done.push((index, entries, (before, unix_now() + 1)));
                    }
                    done
                })
            })
            .collect();
        let mut all: Vec<_> = handles
            .into_iter()
            .flat_map(|handle| handle.join().expect("a curl worker panicked"))
            .collect();
        all.sort_by_key(|(index, ..)| *index);
        all
    });

    let mut agreed = 0;
    let mut quirks_seen = Vec::new();
    for (index, curl_entries, window) in results {
        let case = &CASES[index];
        let ours = expected_from_parse(case.lines, window);
        let ours_matches = same_entries(&curl_entries, &ours);
        match case.curl_quirk {
            None => {
                assert!(
                    ours_matches,
                    "{:?}: curl recorded {curl_entries:#?}, we expect {ours:#?}",
                    case.lines
                );
                agreed += 1;
            }
            Some((curl, why)) => {
                let quirk = to_entries(curl, server.port, window);
                assert!(
                    !same_entries(&quirk, &ours),
                    "{:?}: the documented curl quirk ({why}) is what we parse too",
                    case.lines
                );
                assert!(
                    ours_matches || same_entries(&curl_entries, &quirk),
                    "{:?}: curl recorded {curl_entries:#?}, neither ours {ours:#?} \
                     nor the documented quirk ({why}) {quirk:#?}",
                    case.lines
                );
                if !ours_matches {
                    quirks_seen.push(why);
                }
            }
        }
    }
    eprintln!(
        "curl agreed on {agreed} values and on {} of {} known differences; \
         differences seen:",
        CASES.len() - agreed - quirks_seen.len(),
        CASES.len() - agreed
    );
    for why in quirks_seen {
        eprintln!("  - {why}");
    }
}

/// The entries curl should record if it followed our parse.
fn expected_from_parse(lines: &[&str], window: (u64, u64)) -> Vec<Entry> {
    let mut entries = Vec::new();
    if let Ok(AltSvc::Alternatives(alternatives)) = parse_lines(lines.iter().copied()) {
        for alt in alternatives {
            let Some(alpn) = CURL_PROTOCOLS
                .iter()
                .find(|id| id.as_bytes() == alt.protocol_id.as_slice())
            else {
                continue;
            };
            let max_age = u64::from(alt.max_age);
            entries.push(Entry {
                alpn: alpn.to_string(),
                host: alt.host_or(ORIGIN).to_string(),
                port: alt.port,
                persist: alt.persist,
                expires: (window.0 + max_age, window.1 + max_age),
            });
        }
    }
    entries.sort();
    entries
}

fn to_entries(expected: &[Expected], origin_port: u16, window: (u64, u64)) -> Vec<Entry> {
    let mut entries: Vec<Entry> = expected
        .iter()
        .map(|&(alpn, host, port, max_age, persist)| Entry {
            alpn: alpn.to_string(),
            host: host.to_string(),
            port: if port == ORIGIN_PORT {
                origin_port
            } else {
                port
            },
            persist,
            expires: (window.0 + max_age, window.1 + max_age),
        })
        .collect();
    entries.sort();
    entries
}

/// Same protocol, host, port and persist, and expiries that fit the windows.
fn same_entries(a: &[Entry], b: &[Entry]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            (&x.alpn, &x.host, x.port, x.persist) == (&y.alpn, &y.host, y.port, y.persist)
                && x.expires.0 <= y.expires.1
                && y.expires.0 <= x.expires.1
        })
}

fn require_curl_with_alt_svc() {
    let output = Command::new("curl")
        .arg("-V")
        .output()
        .unwrap_or_else(|e| panic!("this test needs curl on PATH: {e}"));
    let version = String::from_utf8_lossy(&output.stdout);
    let features = version
        .lines()
        .find_map(|line| line.strip_prefix("Features:"))
        .unwrap_or_default();
    assert!(
        features
            .split_whitespace()
            .any(|f| f.eq_ignore_ascii_case("alt-svc")),
        "this test needs a curl built with alt-svc support; `curl -V` says:\n{version}"
    );
}

/// Runs curl against the server with `lines` as Alt-Svc field lines and
/// returns the entries it wrote for the server's origin.
fn fetch(server: &Server, lines: &[&str], cache: &Path) -> Vec<Entry> {
    let query: Vec<String> = lines
        .iter()
        .map(|l| format!("h={}", url_encode(l)))
        .collect();
    let url = format!("https://{ORIGIN}:{}/?{}", server.port, query.join("&"));
    let output = Command::new("curl")
        .args([
            "-q",
            "-sS",
            "-k",
            "--noproxy",
            "*",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
        ])
        .arg("--alt-svc")
        .arg(cache)
        .arg(&url)
        .output()
        .expect("run curl");
    assert!(
        output.status.success(),
        "curl {url} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(cache)
        .unwrap_or_else(|e| panic!("curl wrote no alt-svc cache {}: {e}", cache.display()));
    let mut entries = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        // h1 127.0.0.1 PORT h2 HOST PORT "YYYYMMDD HH:MM:SS" PERSIST PRIO
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 9 + 1, "unexpected cache line {line:?}");
        assert_eq!(
            (fields[1], fields[2]),
            (ORIGIN, server.port.to_string().as_str()),
            "entry for another origin: {line:?}"
        );
        let expires = cache_time(fields[6], fields[7])
            .unwrap_or_else(|| panic!("bad date in cache line {line:?}"));
        entries.push(Entry {
            alpn: fields[3].to_string(),
            host: fields[4]
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port: fields[5].parse().expect("port in cache line"),
            persist: fields[8] == "1",
            expires: (expires, expires),
        });
    }
    entries.sort();
    entries
}

/// `"YYYYMMDD` and `HH:MM:SS"` (UTC) as Unix seconds.
fn cache_time(date: &str, time: &str) -> Option<u64> {
    let date = date.strip_prefix('"')?;
    let time = time.strip_suffix('"')?;
    let number = |s: &str| s.parse::<i64>().ok();
    let (year, month, day) = (
        number(date.get(..date.len().checked_sub(4)?)?)?,
        number(date.get(date.len() - 4..date.len() - 2)?)?,
        number(date.get(date.len() - 2..)?)?,
    );
    let hms: Vec<i64> = time.split(':').map(number).collect::<Option<_>>()?;
    let [h, m, s] = hms[..] else { return None };
    let seconds = days_since_epoch(year, month, day) * 86_400 + h * 3600 + m * 60 + s;
    u64::try_from(seconds).ok()
}

/// Days from 1970-01-01 to a proleptic Gregorian date, counting years from
/// March so the leap day comes last.
fn days_since_epoch(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Answers every GET with one `Alt-Svc` field line per `h` query parameter.
const SERVER_PY: &str = r#"
import http.server, ssl, sys, urllib.parse

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Without this each response waits ~40 ms: Nagle against curl's delayed ACK.
    disable_nagle_algorithm = True

    def do_GET(self):
        query = urllib.parse.urlsplit(self.path).query
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        self.send_response(200)
        for name, value in pairs:
            if name == "h":
                self.send_header("Alt-Svc", value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let output = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .unwrap_or_else(|e| panic!("this test needs openssl on PATH: {e}"));
        assert!(
            output.status.success(),
            "openssl req failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(SERVER_PY)
            .arg(&cert)
            .arg(&key)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("this test needs python3 on PATH: {e}"));
        let mut first_line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut first_line);
        }
        let port = match first_line.trim().parse() {
            Ok(port) => port,
            Err(_) => {
                let _ = child.kill();
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                let _ = child.wait();
                panic!("the Python HTTPS server did not start: {stderr}");
            }
        };
        Server { child, port }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let path = std::env::temp_dir().join(format!("apiway-altsvc-curl-{}", std::process::id()));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
