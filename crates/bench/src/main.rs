//! `apiway-bench`: apiway against HAProxy, nginx and a direct connection,
//! all in the same run, interleaved, on loopback.
//!
//! ```text
//! cargo build --release -p apiway
//! cargo run --release -p apiway-bench -- [--quick] [--only SCENARIO,...]
//! ```
//!
//! Progress goes to stderr; the markdown report (machine, table with
//! ratios, notes) goes to stdout and, with `--output`, to a file.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;

mod backend;
mod bulk;
mod gateway_process;
mod lineup;
mod load;
mod machine;
mod protocol;
mod report;
mod scenarios;

use lineup::{ApiwayRole, Contender, LineupOptions};
use report::ScenarioReport;
use scenarios::Settings;

/// Benchmarks the apiway gateway (TLS passthrough by SNI) against HAProxy,
/// nginx and a direct connection.
#[derive(Parser, Debug)]
#[command(name = "apiway-bench")]
struct Cli {
    /// Shorter trials and fewer rounds (about 2 minutes instead of 6).
    #[arg(long)]
    quick: bool,
    /// Run only these scenarios (comma-separated): throughput, conn_rate,
    /// conn_rate_tls, idle_memory, reconnect_storm, reload, agent_failover,
    /// client_failover, client_overhead, gateway_api, tunnel.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The apiway binary [default: `apiway` next to this program, i.e.
    /// target/release/apiway].
    #[arg(long)]
    apiway: Option<PathBuf>,
    /// Contenders (comma-separated): apiway, haproxy, nginx, direct.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "apiway,haproxy,nginx,direct"
    )]
    contenders: Vec<String>,
    /// Threads each proxy gets: HAProxy `nbthread`, nginx
    /// `worker_processes`, apiway tokio worker threads.
    #[arg(long, default_value_t = 1)]
    proxy_threads: usize,
    /// What the apiway contender runs: `gateway` (all scenarios) or `agent`
    /// (`apiway agent --upstream direct` to the one backend: throughput,
    /// conn_rate, idle_memory).
    #[arg(long, default_value = "gateway")]
    apiway_role: String,
    /// Clients in reconnect_storm [default: 9000, with --quick 3000]. Each
    /// holds two descriptors in every proxy and two in this process (the
    /// backend is here too), so the open-file limit (20,000 here) caps it
    /// below 10,000.
    #[arg(long)]
    storm_clients: Option<usize>,
    /// reconnect_storm: apiway's listener `when_full` setting, `queue`
    /// (apiway's default: stop accepting at the limit, as HAProxy and nginx
    /// do) or `close` (over the limit closed at once).
    #[arg(long, default_value = "queue", value_parser = ["close", "queue"])]
    storm_apiway_when_full: String,
    /// Also write the markdown report to this file.
    #[arg(long)]
    output: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // On Ctrl-C or SIGTERM the run future is dropped, and with it every
    // running proxy (each kills its process group on drop).
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = run(cli) => outcome,
            signal = interrupted() => Err(anyhow::anyhow!("interrupted by {signal}; proxies stopped")),
        }
    });
    match outcome {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT or SIGTERM with the signal's name.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// Runs the chosen scenarios; `Ok(false)` when one of them failed.
async fn run(cli: Cli) -> Result<bool> {
    let nofile = raise_nofile_limit()?;
    let contenders = parse_contenders(&cli.contenders)?;
    let scenarios = choose_scenarios(&cli.only)?;
    let apiway = match cli.apiway {
        Some(path) => path,
        None => default_apiway()?,
    };
    check_peers(&contenders, &apiway)?;
    if cli.proxy_threads == 0 {
        bail!("--proxy-threads must be at least 1");
    }

    let apiway_role = match cli.apiway_role.as_str() {
        "gateway" => ApiwayRole::Gateway,
        "agent" => {
            if let Some(s) = scenarios
                .iter()
                .find(|s| !["throughput", "conn_rate", "idle_memory"].contains(&s.as_str()))
            {
                bail!("--apiway-role agent runs throughput, conn_rate and idle_memory; not {s} (use --only)");
            }
            ApiwayRole::Agent
        }
        other => bail!("--apiway-role: `{other}` is neither gateway nor agent"),
    };
    let lineup = LineupOptions {
        apiway: apiway.clone(),
        proxy_threads: cli.proxy_threads,
        contenders: contenders.clone(),
        apiway_role,
        capacity: None,
    };
    let mut settings = Settings::new(cli.quick, lineup);
    settings.storm_apiway_queue = cli.storm_apiway_when_full == "queue";
    if let Some(clients) = cli.storm_clients {
        if clients == 0 {
            bail!("--storm-clients must be at least 1");
        }
        settings.storm_clients = clients;
    }
    let facts = machine::facts(&apiway);
    let started = Instant::now();
    let mut reports: Vec<(String, Result<ScenarioReport>)> = Vec::new();
    for name in &scenarios {
        eprintln!("== {name}");
        let scenario_started = Instant::now();
        let result = match name.as_str() {
            "throughput" => scenarios::throughput::run(&settings).await,
            "conn_rate" => {
                scenarios::conn_rate::run(&settings, scenarios::conn_rate::Mode::Plain).await
            }
            "conn_rate_tls" => {
                scenarios::conn_rate::run(&settings, scenarios::conn_rate::Mode::Tls).await
            }
            "idle_memory" => scenarios::idle_memory::run(&settings).await,
            "reconnect_storm" => scenarios::reconnect_storm::run(&settings, nofile).await,
            "reload" => scenarios::reload::run(&settings).await,
            "agent_failover" => scenarios::agent_failover::run(&settings).await,
            "client_failover" => scenarios::client_failover::run(&settings).await,
            "client_overhead" => scenarios::client_overhead::run(&settings).await,
            "gateway_api" => scenarios::gateway_api::run(&settings).await,
            "tunnel" => scenarios::tunnel::run(&settings).await,
            other => bail!("unknown scenario {other}"),
        };
        if let Err(e) = &result {
            eprintln!("   {name} FAILED: {e:#}");
        }
        eprintln!("   ({:.0} s)", scenario_started.elapsed().as_secs_f64());
        reports.push((name.clone(), result));
    }

    let markdown = render(
        &cli.quick,
        &settings,
        &facts,
        nofile,
        &contenders,
        &reports,
        started,
    );
    println!("{markdown}");
    if let Some(path) = &cli.output {
        std::fs::write(path, &markdown).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(reports.iter().all(|(_, r)| r.is_ok()))
}

fn render(
    quick: &bool,
    settings: &Settings,
    facts: &[(String, String)],
    nofile: u64,
    contenders: &[Contender],
    reports: &[(String, Result<ScenarioReport>)],
    started: Instant,
) -> String {
    let mut out = String::new();
    out.push_str("### Machine\n\n");
    for (key, value) in facts {
        out.push_str(&format!("- {key}: {value}\n"));
    }
    out.push_str(&format!(
        "- run: {}{}, {:.0} s; every proxy gets {} thread(s) (HAProxy `nbthread`, nginx `worker_processes`, apiway `TOKIO_WORKER_THREADS`); the load generator and backends share the same cores; open-file limit {nofile}\n",
        if *quick { "--quick" } else { "full" },
        format_args!(
            ", trials of {} s × {} round(s), interleaved",
            settings.trial.as_secs_f64(),
            settings.rounds
        ),
        started.elapsed().as_secs_f64(),
        settings.lineup.proxy_threads,
    ));
    if settings.lineup.apiway_role == ApiwayRole::Agent {
        out.push_str("- the apiway contender is `apiway agent --upstream direct --endpoint BACKEND --health-check none` (the per-node forwarder's relay; it ignores the SNI)\n");
    }
    out.push_str(&format!(
        "- load average at end: {}\n",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    ));
    out.push_str("\n### Results\n\n");
    let rows: Vec<report::Row> = reports
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .flat_map(|r| r.rows.iter().cloned())
        .collect();
    out.push_str(&report::markdown_table(&rows, contenders));
    out.push_str("\n### Notes from the run\n\n");
    for (name, result) in reports {
        match result {
            Ok(r) => {
                for note in &r.notes {
                    out.push_str(&format!("- {note}\n"));
                }
            }
            Err(e) => out.push_str(&format!("- **{name} FAILED**: {e:#}\n")),
        }
    }
    out
}

fn parse_contenders(names: &[String]) -> Result<Vec<Contender>> {
    let mut chosen: Vec<Contender> = names
        .iter()
        .map(|n| Contender::parse(n))
        .collect::<Result<_>>()?;
    chosen.sort();
    chosen.dedup();
    if chosen.is_empty() {
        bail!("--contenders is empty");
    }
    Ok(chosen)
}

fn choose_scenarios(only: &[String]) -> Result<Vec<String>> {
    if only.is_empty() {
        return Ok(scenarios::ALL.iter().map(|s| s.to_string()).collect());
    }
    for name in only {
        if !scenarios::ALL.contains(&name.as_str()) {
            bail!(
                "unknown scenario `{name}`; choose from {}",
                scenarios::ALL.join(", ")
            );
        }
    }
    // Keep the canonical order.
    Ok(scenarios::ALL
        .iter()
        .filter(|s| only.iter().any(|o| o == *s))
        .map(|s| s.to_string())
        .collect())
}

/// `apiway` next to this executable (both live in target/release).
fn default_apiway() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding this program's path")?;
    let dir = exe
        .parent()
        .context("this program's path has no directory")?;
    Ok(dir.join("apiway"))
}

/// Fails early, naming the Debian package, if a peer is missing.
fn check_peers(contenders: &[Contender], apiway: &Path) -> Result<()> {
    use apiway_test_support::peers::{require_binary, NGINX_STREAM_MODULE};
    if contenders.contains(&Contender::Apiway) && !apiway.is_file() {
        bail!(
            "the apiway binary {} does not exist: run `cargo build --release -p apiway` first, or pass --apiway PATH",
            apiway.display()
        );
    }
    if contenders.contains(&Contender::Haproxy) {
        require_binary("haproxy")?;
    }
    if contenders.contains(&Contender::Nginx) {
        require_binary("nginx")?;
        if !Path::new(NGINX_STREAM_MODULE).is_file() {
            bail!(
                "nginx's stream module {NGINX_STREAM_MODULE} is missing: run `apt-get install libnginx-mod-stream`"
            );
        }
    }
    Ok(())
}

/// Raises the soft open-file limit to the hard one: idle_memory holds
/// 10,000 sockets in this process (client and backend ends).
fn raise_nofile_limit() -> Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        setrlimit(Resource::Nofile, limit).context("raising RLIMIT_NOFILE")?;
    }
    Ok(getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX))
}
