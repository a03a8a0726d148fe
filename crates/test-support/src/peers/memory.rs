//! Process memory from `/proc`, for benchmarks.

use std::fs;

use anyhow::{Context, Result};

/// Memory use of one process, from `/proc/PID/smaps_rollup`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcMemory {
    /// Resident set size in KiB (shared pages counted in full).
    pub rss_kb: u64,
    /// Proportional set size in KiB (shared pages divided among sharers):
    /// the figure to add up over several processes.
    pub pss_kb: u64,
}

impl std::ops::Add for ProcMemory {
    type Output = ProcMemory;

    fn add(self, other: ProcMemory) -> ProcMemory {
        ProcMemory {
            rss_kb: self.rss_kb + other.rss_kb,
            pss_kb: self.pss_kb + other.pss_kb,
        }
    }
}

/// Reads RSS and PSS of `pid` from `/proc/PID/smaps_rollup`.
pub fn proc_memory(pid: u32) -> Result<ProcMemory> {
    let path = format!("/proc/{pid}/smaps_rollup");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    Ok(parse_smaps_rollup(&text))
}

fn parse_smaps_rollup(text: &str) -> ProcMemory {
    let mut memory = ProcMemory::default();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(key), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Ok(kb) = value.parse::<u64>() else {
            continue;
        };
        match key {
            "Rss:" => memory.rss_kb = kb,
            "Pss:" => memory.pss_kb = kb,
            _ => {}
        }
    }
    memory
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_smaps_rollup() {
        let text = "55d0c1a00000-7ffc [rollup]\nRss:                5120 kB\nPss:                2048 kB\nPss_Anon:  1 kB\n";
        assert_eq!(
            parse_smaps_rollup(text),
            ProcMemory {
                rss_kb: 5120,
                pss_kb: 2048
            }
        );
    }

    #[test]
    fn reads_own_memory() -> Result<()> {
        let memory = proc_memory(std::process::id())?;
        assert!(memory.rss_kb > 0 && memory.pss_kb > 0);
        Ok(())
    }
}
