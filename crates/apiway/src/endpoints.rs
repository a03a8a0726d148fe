//! `apiway endpoints`: what apiway-client sees for a kubeconfig's cluster.
//! It builds the client from the kubeconfig, makes one request to the
//! origin (which teaches it any `Alt-Svc`), lists the `default/kubernetes`
//! EndpointSlices, probes every endpoint and prints a table or JSON.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use apiway_client::{Block, Client, ClientConfig, ProbeReport, Stage};
use clap::ValueEnum;

/// `apiway endpoints` flags.
#[derive(clap::Args, Debug)]
pub struct EndpointsArgs {
    /// The kubeconfig file [default: $KUBECONFIG, else ~/.kube/config].
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context [default: its current-context].
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Static alternatives, comma-separated `host`, `host:port` or
    /// `[v6]:port`, as the client's `alternative_hosts` [default: none].
    #[arg(long, value_name = "LIST")]
    alternative_hosts: Option<String>,
    /// TLS server name and `:authority` on alternatives [default:
    /// kubernetes.default].
    #[arg(long, value_name = "NAME")]
    alternative_server_name: Option<String>,
    /// Do not list the `default/kubernetes` EndpointSlices [default: list
    /// them; a client without RBAC for them gets a note, not an error].
    #[arg(long)]
    no_discovery: bool,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

/// How `apiway endpoints` prints.
#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum Output {
    /// A table and notes, for people.
    Table,
    /// One JSON object, for programs.
    Json,
}

/// What the command found, to print.
struct Findings {
    origin: String,
    /// The API server's `gitVersion`, or why `GET /version` failed.
    version: Result<String, String>,
    /// How many endpoints the EndpointSlices list, or why listing failed;
    /// `None` with `--no-discovery`.
    discovery: Option<Result<usize, String>>,
    reports: Vec<ProbeReport>,
    now: Instant,
    /// The `--alternative-hosts` endpoints.
    fixed: HashSet<String>,
    /// Endpoints known after `GET /version` that were not static: learned
    /// from `Alt-Svc`.
    alt_svc: HashSet<String>,
    notes: Vec<String>,
}

impl Findings {
    /// Where an endpoint came from.
    fn source(&self, r: &ProbeReport) -> &'static str {
        if r.origin {
            "origin"
        } else if self.fixed.contains(&r.address) {
            "static"
        } else if self.alt_svc.contains(&r.address) {
            "alt-svc"
        } else {
            "endpointslice"
        }
    }
}

/// Runs the command; an error when no endpoint passed the probe (exit 1).
pub async fn run(args: EndpointsArgs) -> Result<()> {
    let kubeconfig = match &args.kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("reading the kubeconfig {}", path.display()))?,
        None => kube::config::Kubeconfig::read().context(
            "reading the kubeconfig ($KUBECONFIG or ~/.kube/config; or pass --kubeconfig)",
        )?,
    };
    let options = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let kube_config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .context("the kubeconfig")?;
    let mut config = ClientConfig::from_kube_config(&kube_config)?;
    if let Some(list) = &args.alternative_hosts {
        config = config.with_alternative_hosts(list)?;
    }
    if let Some(name) = &args.alternative_server_name {
        config.alternative_server_name = name.clone();
    }
    let fixed: HashSet<String> = config
        .alternative_hosts
        .iter()
        .map(ToString::to_string)
        .collect();
    let origin = config.origin.to_string();
    let client = Client::new(config)?;

    let mut notes = Vec::new();
    let version = client
        .fetch(http::Request::get("/version").body(bytes::Bytes::new())?)
        .await;
    let version = match version {
        Ok(response) if response.status().is_success() => {
            let body: serde_json::Value =
                serde_json::from_slice(response.body()).unwrap_or_default();
            Ok(body["gitVersion"].as_str().unwrap_or("?").to_owned())
        }
        Ok(response) => Err(format!("GET /version answered {}", response.status())),
        Err(e) => Err(format!("GET /version: {e}")),
    };
    if let Err(e) = &version {
        notes.push(e.clone());
    }
    let alt_svc: HashSet<String> = client
        .endpoints()
        .into_iter()
        .filter(|e| !e.origin && !fixed.contains(&e.address))
        .map(|e| e.address)
        .collect();
    let discovery = if args.no_discovery {
        None
    } else {
        let outcome = client.discover_now().await;
        if let Err(e) = &outcome {
            notes.push(match e {
                // Its message already says it is about discovery.
                apiway_client::Error::Discovery(_) => e.to_string(),
                other => format!("EndpointSlice discovery: {other}"),
            });
        }
        Some(outcome.map_err(|e| e.to_string()))
    };

    let reports = client.probe().await;
    let now = Instant::now();
    for r in &reports {
        for (stage, outcome) in [
            ("connect", &r.connect),
            ("tls", &r.tls),
            ("readyz", &r.readyz),
        ] {
            if let Stage::Failed(reason) = outcome {
                let reason = apiway_core::endpoint::failover::reason_after(&r.address, reason);
                notes.push(format!("{}: {stage}: {reason}", r.address));
            }
        }
    }
    let healthy = reports.iter().any(|r| r.chosen && r.healthy());
    let findings = Findings {
        origin,
        version,
        discovery,
        reports,
        now,
        fixed,
        alt_svc,
        notes,
    };
    match args.output {
        Output::Table => print!("{}", findings.table()),
        Output::Json => println!("{:#}", findings.json()),
    }
    if !healthy {
        bail!("the endpoint the client would use next did not pass the probe");
    }
    Ok(())
}

fn stage_word(stage: &Stage) -> &'static str {
    match stage {
        Stage::NotReached => "-",
        Stage::Passed => "ok",
        Stage::Failed(_) => "FAILED",
    }
}

fn blocked_text(block: Option<Option<Duration>>) -> String {
    match block {
        None => "-".into(),
        Some(None) => "for good".into(),
        Some(Some(left)) => format!("{:.0}s", left.as_secs_f64().ceil()),
    }
}

impl Findings {
    fn table(&self) -> String {
        let Findings {
            origin,
            version,
            discovery,
            reports,
            now,
            notes,
            ..
        } = self;
        let now = *now;
        let mut rows = vec![[
            "ENDPOINT".to_owned(),
            "SOURCE".into(),
            "LOCAL".into(),
            "CONNECT".into(),
            "TLS".into(),
            "READYZ".into(),
            "LATENCY".into(),
            "BLOCKED".into(),
            "CHOSEN".into(),
        ]];
        for r in reports {
            rows.push([
                r.address.clone(),
                self.source(r).into(),
                if r.local { "yes" } else { "no" }.into(),
                stage_word(&r.connect).into(),
                match &r.tls {
                    Stage::Passed => "verified".into(),
                    other => stage_word(other).into(),
                },
                stage_word(&r.readyz).into(),
                format!("{:.1}ms", r.latency.as_secs_f64() * 1e3),
                blocked_text(r.blocked_for(now)),
                if r.chosen { "*" } else { "" }.into(),
            ]);
        }
        let widths: Vec<usize> = (0..9)
            .map(|i| rows.iter().map(|row| row[i].len()).max().unwrap_or(0))
            .collect();
        let mut out = format!("origin {origin}");
        match version {
            Ok(v) => out.push_str(&format!(" (API server {v})")),
            Err(_) => out.push_str(" (GET /version failed, see below)"),
        }
        match discovery {
            Some(Ok(n)) => out.push_str(&format!("; EndpointSlices list {n} endpoint(s)\n")),
            Some(Err(_)) => out.push_str("; EndpointSlice discovery failed, see below\n"),
            None => out.push_str("; EndpointSlice discovery off\n"),
        }
        for row in rows {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        for note in notes {
            out.push_str(&format!("- {note}\n"));
        }
        out
    }

    fn json(&self) -> serde_json::Value {
        let Findings {
            origin,
            version,
            discovery,
            reports,
            now,
            notes,
            ..
        } = self;
        let now = *now;
        use serde_json::json;
        let stage = |s: &Stage| match s {
            Stage::NotReached => json!("not_reached"),
            Stage::Passed => json!("passed"),
            Stage::Failed(reason) => json!({ "failed": reason }),
        };
        let endpoints: Vec<serde_json::Value> = reports
        .iter()
        .map(|r| {
            json!({
                "address": r.address,
                "source": self.source(r),
                "local": r.local,
                "connect": stage(&r.connect),
                "tls": stage(&r.tls),
                "readyz": stage(&r.readyz),
                "latency_ms": (r.latency.as_secs_f64() * 1e6).round() / 1e3,
                "blocked": match r.blocked {
                    None => json!(null),
                    Some(Block::Forever) => json!("forever"),
                    Some(Block::Until(_)) => json!({
                        "seconds_left": r.blocked_for(now).flatten().map_or(0.0, |d| d.as_secs_f64())
                    }),
                },
                "chosen": r.chosen,
            })
        })
        .collect();
        json!({
            "origin": origin,
            "version": match version { Ok(v) => json!(v), Err(e) => json!({ "error": e }) },
            "discovery": match discovery {
                None => json!(null),
                Some(Ok(n)) => json!({ "endpoints": n }),
                Some(Err(e)) => json!({ "error": e }),
            },
            "endpoints": endpoints,
            "notes": notes,
        })
    }
}
