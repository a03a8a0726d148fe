//! Three stand-in API server processes with one certificate and one port,
//! each advertising all three in `Alt-Svc`; clients for them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use apiway_client::{Client, ClientConfig};
use apiway_standin::{pki, Ca, Issued};
use apiway_test_support::peers::StandinProcess;

/// Where the stand-ins listen; the first is also the origin (the address
/// a kubeconfig would name).
pub const IPS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(127, 0, 0, 2),
    Ipv4Addr::new(127, 0, 0, 3),
    Ipv4Addr::new(127, 0, 0, 4),
];

/// How each path reaches the API servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Through the client's HTTP/2 connections.
    H2,
    /// kube's own HTTP/1.1 stack over the client's dialer.
    Http1,
}

/// What happens to the endpoint in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL: its connections are reset, new connects refused.
    Kill,
    /// SIGSTOP: connects still complete (the backlog), nothing answers.
    Hang,
}

/// Three running stand-ins.
pub struct Standins {
    pub ca: Ca,
    pub port: u16,
    pub processes: Vec<StandinProcess>,
}

impl Standins {
    /// Starts the three, passing `extra_args` to each. The port is picked
    /// before the stand-ins bind it, so another test may take it in
    /// between: a start that fails is tried again on another port.
    pub async fn start(extra_args: &[String]) -> Result<Standins> {
        let ca = Ca::new("apiway client e2e CA")?;
        let ips: Vec<IpAddr> = IPS.iter().copied().map(IpAddr::V4).collect();
        let cert = ca.issue_server(&["kubernetes.default"], &ips)?;
        let mut failures = Vec::new();
        for _ in 0..3 {
            match Standins::start_on_free_port(&cert, extra_args).await {
                Ok((port, processes)) => {
                    return Ok(Standins {
                        ca,
                        port,
                        processes,
                    })
                }
                Err(e) => failures.push(format!("{e:#}")),
            }
        }
        bail!("the stand-ins did not start: {failures:?}")
    }

    async fn start_on_free_port(
        cert: &Issued,
        extra_args: &[String],
    ) -> Result<(u16, Vec<StandinProcess>)> {
        // Free on the first address; the kernel hands out ports in a
        // cycle, so rarely taken on the others.
        let port = std::net::TcpListener::bind((IPS[0], 0))?
            .local_addr()?
            .port();
        let alt_svc = IPS
            .iter()
            .map(|ip| format!("h2=\"{ip}:{port}\"; ma=60"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut args = vec!["--alt-svc".to_owned(), alt_svc];
        args.extend_from_slice(extra_args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut processes = Vec::new();
        for (i, ip) in IPS.iter().enumerate() {
            let listen = SocketAddr::new(IpAddr::V4(*ip), port);
            processes.push(
                StandinProcess::start_with_args(
                    Path::new(env!("CARGO_BIN_EXE_apiway")),
                    &format!("apiserver-{i}"),
                    listen,
                    cert,
                    None,
                    &args,
                    None,
                )
                .await?,
            );
        }
        Ok((port, processes))
    }

    /// `https://127.0.0.2:PORT`.
    pub fn origin(&self) -> String {
        format!("https://{}:{}", IPS[0], self.port)
    }

    /// An apiway client for the origin, with short timeouts so a hang is
    /// noticed within a test's patience.
    pub fn client(&self) -> Result<Client> {
        let mut config =
            ClientConfig::new(&self.origin(), pki::client_config(&self.ca, None, &[])?)?;
        config.keepalive = Duration::from_secs(1);
        config.check_timeout = Duration::from_secs(2);
        config.connect_timeout = Duration::from_secs(1);
        Ok(Client::new(config)?)
    }

    /// A kube config for the origin, trusting the CA, with short timeouts.
    pub fn kube_config(&self) -> Result<kube::Config> {
        let mut config = kube::Config::new(self.origin().parse().context("origin URL")?);
        config.root_cert = Some(vec![self.ca.cert_der()?.to_vec()]);
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(Duration::from_secs(3));
        config.write_timeout = Some(Duration::from_secs(3));
        Ok(config)
    }

    /// A kube client over `client` on `transport`.
    pub fn kube_client(&self, client: &Client, transport: Transport) -> Result<kube::Client> {
        Ok(match transport {
            Transport::H2 => client.kube_client("default"),
            Transport::Http1 => client.http1_kube_client(&self.kube_config()?)?,
        })
    }

    /// The index of the stand-in at `endpoint` (`host:port`).
    pub fn index_of(&self, endpoint: &str) -> Result<usize> {
        match self
            .processes
            .iter()
            .position(|p| p.addr().to_string() == endpoint)
        {
            Some(i) => Ok(i),
            None => bail!("{endpoint} is none of the stand-ins"),
        }
    }

    /// Applies `fault` to stand-in `index`.
    pub fn inflict(&mut self, index: usize, fault: Fault) -> Result<()> {
        match fault {
            Fault::Kill => {
                self.processes[index].kill();
                Ok(())
            }
            Fault::Hang => self.processes[index].hang(),
        }
    }
}

/// `fut`, or an error after `limit`.
pub async fn bounded<T>(
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, fut)
        .await
        .with_context(|| format!("test took longer than its bound of {limit:?}"))?
}
