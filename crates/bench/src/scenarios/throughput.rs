//! One connection moving bulk bytes, each direction on its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use super::{list, median, rotated, Settings, SNI};
use crate::backend::Backend;
use crate::bulk::Source;
use crate::lineup::{Contender, Lineup, Route};
use crate::load;
use crate::protocol::{self, Measurement};
use crate::report::{Better, Row, ScenarioReport, Target};

#[derive(Clone, Copy)]
enum Direction {
    Up,
    Down,
}

impl Direction {
    fn label(self) -> &'static str {
        match self {
            Direction::Up => "client→backend",
            Direction::Down => "backend→client",
        }
    }
}

/// Measures Gbit/s through each contender, both directions.
pub async fn run(settings: &Settings) -> Result<ScenarioReport> {
    let backend = Backend::plain().await?;
    let routes = vec![Route::new("main", SNI, &[backend.addr()])];
    let lineup = Lineup::start(&settings.lineup, routes).await?;
    let hello = protocol::client_hello(SNI)?;
    let source = Arc::new(Source::new()?);
    let contenders = lineup.contenders();
    let mut report = ScenarioReport::default();

    for direction in [Direction::Up, Direction::Down] {
        let mut gbits: BTreeMap<Contender, Vec<f64>> = BTreeMap::new();
        let mut cpu_per_gib: BTreeMap<Contender, Vec<f64>> = BTreeMap::new();
        let mut failed: BTreeMap<Contender, String> = BTreeMap::new();
        // A short untimed pass warms caches, pools and TCP autotuning.
        for &c in &contenders {
            let _ = trial(
                &lineup,
                c,
                direction,
                &hello,
                &source,
                Duration::from_millis(300),
            )
            .await;
        }
        for round in 0..settings.rounds {
            for c in rotated(&contenders, round) {
                if failed.contains_key(&c) {
                    continue;
                }
                let cpu_before = lineup.cpu_time(c);
                match trial(&lineup, c, direction, &hello, &source, settings.trial).await {
                    Ok(m) => {
                        gbits.entry(c).or_default().push(m.gbit_per_s());
                        if c.is_proxy() {
                            let cpu = lineup.cpu_time(c).saturating_sub(cpu_before);
                            let gib = m.bytes as f64 / f64::from(1u32 << 30);
                            if gib > 0.0 {
                                cpu_per_gib
                                    .entry(c)
                                    .or_default()
                                    .push(cpu.as_secs_f64() * 1000.0 / gib);
                            }
                        }
                        eprintln!(
                            "  throughput {} {:>8}: {:6.2} Gbit/s",
                            direction.label(),
                            c.label(),
                            m.gbit_per_s()
                        );
                    }
                    Err(e) => {
                        eprintln!(
                            "  throughput {} {}: FAILED {e:#}",
                            direction.label(),
                            c.label()
                        );
                        failed.insert(c, format!("{e:#}"));
                    }
                }
            }
        }

        let mut row = Row::new("throughput", direction.label(), "Gbit/s", Better::Higher, 2)
            .target(Target::RatioAtLeast(Contender::Haproxy, 1.25))
            .target(Target::RatioAtLeast(Contender::Direct, 0.6));
        for (c, values) in &gbits {
            if let Some(m) = median(values) {
                row.set(*c, m);
            }
            report.notes.push(format!(
                "throughput {}: {} rounds {} Gbit/s",
                direction.label(),
                c.label(),
                list(values, 2)
            ));
        }
        report.rows.push(row);

        let mut cpu_row = Row::new(
            "throughput",
            &format!("{} proxy CPU", direction.label()),
            "ms/GiB",
            Better::Lower,
            0,
        );
        for (c, values) in &cpu_per_gib {
            if let Some(m) = median(values) {
                cpu_row.set(*c, m);
            }
        }
        report.rows.push(cpu_row);
        for (c, e) in failed {
            report.notes.push(format!(
                "throughput {}: {} FAILED: {e}",
                direction.label(),
                c.label()
            ));
        }
    }
    Ok(report)
}

async fn trial(
    lineup: &Lineup,
    contender: Contender,
    direction: Direction,
    hello: &[u8],
    source: &Arc<Source>,
    window: Duration,
) -> Result<Measurement> {
    let target = lineup.target(contender, SNI)?;
    match direction {
        Direction::Up => load::upload(target, hello, window, source).await,
        Direction::Down => load::download(target, hello, window).await,
    }
}
