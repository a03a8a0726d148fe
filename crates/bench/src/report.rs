//! Results as rows of one markdown table, with ratios against apiway and
//! the targets from the issue.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::lineup::Contender;

/// Which way is better for a metric (for reading ratios).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// More is better (throughput, rates).
    Higher,
    /// Less is better (latency, memory, time, failures).
    Lower,
}

/// A goal the issue sets for apiway.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// apiway / other ≥ ratio.
    RatioAtLeast(Contender, f64),
    /// apiway / other ≤ ratio (for lower-is-better figures).
    RatioAtMost(Contender, f64),
    /// apiway's value ≤ limit.
    AtMost(f64),
}

impl Target {
    fn describe(&self, unit: &str) -> String {
        match self {
            Target::RatioAtLeast(other, ratio) => format!("≥ {ratio}× {}", other.label()),
            Target::RatioAtMost(other, ratio) => format!("≤ {ratio}× {}", other.label()),
            Target::AtMost(limit) if *limit == 0.0 => "0".to_string(),
            Target::AtMost(limit) => format!("≤ {} {unit}", trim_number(*limit)),
        }
    }

    /// `None` when apiway (or the other contender) has no value.
    fn met(&self, values: &BTreeMap<Contender, f64>) -> Option<bool> {
        let apiway = *values.get(&Contender::Apiway)?;
        match self {
            Target::RatioAtLeast(other, ratio) => {
                let other = *values.get(other)?;
                (other > 0.0).then(|| apiway / other >= *ratio)
            }
            Target::RatioAtMost(other, ratio) => {
                let other = *values.get(other)?;
                (other > 0.0).then(|| apiway / other <= *ratio)
            }
            Target::AtMost(limit) => Some(apiway <= *limit),
        }
    }
}

/// One measured figure for every contender.
#[derive(Clone, Debug)]
pub struct Row {
    /// Scenario name, e.g. `throughput`.
    pub scenario: String,
    /// What is measured, e.g. `client→backend`.
    pub metric: String,
    /// Unit, e.g. `Gbit/s`.
    pub unit: String,
    /// Which way is better.
    pub better: Better,
    /// Decimals to print.
    pub decimals: usize,
    /// Values; a contender that was not (or could not be) measured is absent.
    pub values: BTreeMap<Contender, f64>,
    /// Goals for apiway.
    pub targets: Vec<Target>,
}

impl Row {
    /// A row without values yet.
    pub fn new(scenario: &str, metric: &str, unit: &str, better: Better, decimals: usize) -> Row {
        Row {
            scenario: scenario.to_string(),
            metric: metric.to_string(),
            unit: unit.to_string(),
            better,
            decimals,
            values: BTreeMap::new(),
            targets: Vec::new(),
        }
    }

    /// Adds a goal.
    pub fn target(mut self, target: Target) -> Row {
        self.targets.push(target);
        self
    }

    /// Sets a value.
    pub fn set(&mut self, contender: Contender, value: f64) {
        self.values.insert(contender, value);
    }

    /// Whether every target is met; `None` without targets or values.
    pub fn met(&self) -> Option<bool> {
        let verdicts: Vec<Option<bool>> =
            self.targets.iter().map(|t| t.met(&self.values)).collect();
        if verdicts.is_empty() || verdicts.iter().any(Option::is_none) {
            return None;
        }
        Some(verdicts.iter().all(|v| *v == Some(true)))
    }
}

/// Everything one scenario found: rows for the table and sentences for the
/// notes under it.
#[derive(Debug, Default)]
pub struct ScenarioReport {
    /// Table rows.
    pub rows: Vec<Row>,
    /// Free-form observations (setup, per-round values, anomalies).
    pub notes: Vec<String>,
}

/// Renders the results table.
pub fn markdown_table(rows: &[Row], contenders: &[Contender]) -> String {
    let others: Vec<Contender> = contenders
        .iter()
        .copied()
        .filter(|c| *c != Contender::Apiway)
        .collect();
    let mut out = String::from("| scenario | metric | unit |");
    for c in contenders {
        let _ = write!(out, " {} |", c.label());
    }
    if contenders.contains(&Contender::Apiway) {
        for c in &others {
            let _ = write!(out, " apiway/{} |", c.label());
        }
    }
    out.push_str(" target (apiway) | met |\n|---|---|---|");
    let ratio_columns = if contenders.contains(&Contender::Apiway) {
        others.len()
    } else {
        0
    };
    for _ in 0..contenders.len() + ratio_columns {
        out.push_str("---:|");
    }
    out.push_str("---|---|\n");

    for row in rows {
        let arrow = match row.better {
            Better::Higher => "↑",
            Better::Lower => "↓",
        };
        let _ = write!(
            out,
            "| {} | {} {arrow} | {} |",
            row.scenario, row.metric, row.unit
        );
        for c in contenders {
            match row.values.get(c) {
                Some(v) => {
                    let _ = write!(out, " {} |", format_value(*v, row.decimals));
                }
                None => out.push_str(" — |"),
            }
        }
        if ratio_columns > 0 {
            for c in &others {
                match (row.values.get(&Contender::Apiway), row.values.get(c)) {
                    (Some(a), Some(o)) if *o != 0.0 => {
                        let _ = write!(out, " {} |", format_ratio(a / o));
                    }
                    _ => out.push_str(" — |"),
                }
            }
        }
        let targets: Vec<String> = row.targets.iter().map(|t| t.describe(&row.unit)).collect();
        let target = if targets.is_empty() {
            "—".to_string()
        } else {
            targets.join(", ")
        };
        let met = match row.met() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        let _ = writeln!(out, " {target} | {met} |");
    }
    out
}

fn format_value(v: f64, decimals: usize) -> String {
    if v.abs() >= 1_000.0 && decimals == 0 {
        // Thousands separators make rates readable.
        let s = format!("{v:.0}");
        let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
        let mut grouped = String::new();
        for (i, ch) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(ch);
        }
        format!("{sign}{grouped}")
    } else {
        format!("{v:.decimals$}")
    }
}

/// Two decimals, or two significant digits for small ratios.
fn format_ratio(r: f64) -> String {
    if r != 0.0 && r.abs() < 0.095 {
        let digits = (1.0 - r.abs().log10().floor()).clamp(2.0, 6.0) as usize;
        format!("{r:.digits$}×")
    } else {
        format!("{r:.2}×")
    }
}

fn trim_number(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_ratios_and_verdicts() {
        let mut row = Row::new("throughput", "up", "Gbit/s", Better::Higher, 2)
            .target(Target::RatioAtLeast(Contender::Haproxy, 1.25));
        row.set(Contender::Apiway, 10.0);
        row.set(Contender::Haproxy, 5.0);
        let table = markdown_table(&[row], &Contender::ALL);
        assert!(
            table.contains("| 10.00 | 5.00 | — | — | 2.00× | — | — |"),
            "{table}"
        );
        assert!(table.contains("≥ 1.25× HAProxy | yes |"), "{table}");
    }

    #[test]
    fn big_numbers_get_separators() {
        assert_eq!(format_value(1234567.0, 0), "1,234,567");
        assert_eq!(format_value(123.456, 1), "123.5");
        assert_eq!(format_ratio(1.234), "1.23×");
        assert_eq!(format_ratio(0.0032), "0.0032×");
    }
}
