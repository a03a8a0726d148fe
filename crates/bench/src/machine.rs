//! Facts about the machine and the programs measured, for the report.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// What the report says about where it ran.
pub fn facts(apiway: &Path) -> Vec<(String, String)> {
    let mut facts = vec![
        ("date (UTC)".to_string(), utc_now()),
        (
            "nproc".to_string(),
            std::thread::available_parallelism()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into()),
        ),
        (
            "kernel".to_string(),
            read_trimmed("/proc/sys/kernel/osrelease"),
        ),
        ("cpu".to_string(), cpu_model()),
        ("memory".to_string(), mem_total()),
        (
            "load average at start".to_string(),
            read_trimmed("/proc/loadavg")
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        ),
    ];
    facts.push((
        "apiway".to_string(),
        version_line(apiway.as_os_str(), &["--version"]),
    ));
    facts.push((
        "HAProxy".to_string(),
        version_line("haproxy".as_ref(), &["-v"]),
    ));
    facts.push(("nginx".to_string(), version_line("nginx".as_ref(), &["-v"])));
    facts.push(("git".to_string(), git_describe()));
    facts
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

fn mem_total() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(format!("{:.1} GiB", kb as f64 / (1024.0 * 1024.0)))
        })
        .unwrap_or_else(|| "?".into())
}

/// First line of `program args` (stdout or stderr: nginx prints to stderr).
fn version_line(program: &std::ffi::OsStr, args: &[&str]) -> String {
    let mut command = Command::new(program);
    if program == "haproxy" || program == "nginx" {
        // Debian installs both in /usr/sbin, which may not be on PATH.
        if let Ok(path) = apiway_test_support::peers::require_binary(&program.to_string_lossy()) {
            command = Command::new(path);
        }
    }
    match command.args(args).output() {
        Ok(out) => {
            let text = if out.stdout.is_empty() {
                out.stderr
            } else {
                out.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("?")
                .trim()
                .to_string()
        }
        Err(_) => "not found".to_string(),
    }
}

fn git_describe() -> String {
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match run(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) => {
            let dirty = run(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{commit} + uncommitted changes")
            } else {
                commit
            }
        }
        None => "?".to_string(),
    }
}

/// `YYYY-MM-DD HH:MM` in UTC, from the system clock.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Howard Hinnant's days-to-date algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
