//! The `apiway` binary: argument parsing and wiring only.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

mod demo;

/// Keeps Kubernetes components connected to their API servers, and lets one
/// load balancer serve many API servers.
#[derive(Parser, Debug)]
#[command(name = "apiway", version, about, long_about = None)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    /// Log filter in tracing env-filter syntax [default: info; warn for demo].
    /// RUST_LOG overrides it.
    #[arg(long, global = true)]
    log_level: Option<String>,
    #[command(subcommand)]
    role: Role,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand, Debug)]
enum Role {
    /// Route TLS by SNI to API servers without terminating TLS (passthrough),
    /// with health-checked backends, hot reload and graceful drain.
    Gateway {
        /// YAML configuration file; reloaded on change and on SIGHUP.
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// Only validate the configuration file and exit (0 when valid).
        #[arg(long)]
        check: bool,
    },
    /// Run a whole topology on loopback: a gateway in front of stand-in API
    /// servers for two clusters; shows routing by SNI and health-check
    /// ejection, then exits.
    Demo,
    /// Run a stand-in Kubernetes API server (real TLS, HTTP/1.1 and HTTP/2,
    /// /readyz, /version) for trying things out and for tests.
    Standin {
        /// Name reported in answers (the `x-apiway-standin` header).
        #[arg(long, default_value = "standin")]
        name: String,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
        /// Serving certificate (PEM).
        #[arg(long)]
        cert: PathBuf,
        /// Serving key (PEM).
        #[arg(long)]
        key: PathBuf,
        /// Require client certificates signed by this CA (PEM).
        #[arg(long)]
        client_ca: Option<PathBuf>,
    },
}

fn init_logging(format: LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let default_level = if matches!(cli.role, Role::Demo) {
        "warn"
    } else {
        "info"
    };
    init_logging(
        cli.log_format,
        cli.log_level.as_deref().unwrap_or(default_level),
    );
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
    let result = runtime.block_on(async move {
        match cli.role {
            Role::Gateway { config, check } => {
                if check {
                    let text = std::fs::read_to_string(&config).map_err(|e| {
                        anyhow::anyhow!("cannot read the config file {}: {e}", config.display())
                    })?;
                    apiway_gateway::config::parse(&text)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
                    println!("{}: valid", config.display());
                    Ok(())
                } else {
                    apiway_gateway::Gateway::run(config).await
                }
            }
            Role::Demo => demo::run().await,
            Role::Standin {
                name,
                listen,
                cert,
                key,
                client_ca,
            } => {
                let config = apiway_test_support::StandinConfig::from_files(
                    name,
                    listen,
                    &cert,
                    &key,
                    client_ca.as_deref(),
                )?;
                apiway_test_support::serve_forever(config).await
            }
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
