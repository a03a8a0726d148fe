//! What `/proc` says about processes: their descendants and whether they
//! still hold listening TCP sockets (to know when a reload has handed over).

use std::collections::HashSet;
use std::fs;

/// `pid` followed by all its descendants (children, grandchildren, ...),
/// found by scanning the parent pid of every process in `/proc`.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| Some((p, parent_pid(p)?)))
        .collect();
    let mut tree = vec![pid];
    let mut i = 0;
    while let Some(&current) = tree.get(i) {
        tree.extend(
            parents
                .iter()
                .filter(|(_, parent)| *parent == current)
                .map(|(child, _)| *child),
        );
        i += 1;
    }
    tree
}

fn parent_pid(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_ppid(&stat)
}

/// `/proc/PID/stat` is `pid (comm) state ppid ...`; comm may hold spaces
/// and parentheses, so fields are counted after the last `)`.
fn parse_ppid(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` has a file descriptor on a listening TCP socket (IPv4 or
/// IPv6). A worker that stopped accepting during a reload has none.
pub(crate) fn holds_listening_socket(pid: u32) -> bool {
    let listening = listening_inodes();
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path())
            .ok()
            .and_then(|target| socket_inode(&target.to_string_lossy()))
            .is_some_and(|inode| listening.contains(&inode))
    })
}

fn listening_inodes() -> HashSet<u64> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| fs::read_to_string(path).ok())
        .flat_map(|table| parse_listening(&table))
        .collect()
}

/// Inodes of `LISTEN` (state `0A`) rows of a `/proc/net/tcp` table.
fn parse_listening(table: &str) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|row| {
            let fields: Vec<&str> = row.split_whitespace().collect();
            match (fields.get(3), fields.get(9)) {
                (Some(&"0A"), Some(inode)) => inode.parse().ok(),
                _ => None,
            }
        })
        .collect()
}

/// `socket:[12345]` -> 12345.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ppid_with_odd_comm() {
        assert_eq!(parse_ppid("42 (a) b (c) S 7 42 42 0"), Some(7));
    }

    #[test]
    fn parses_listening_rows() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 20 4 30 10 -1\n";
        assert_eq!(parse_listening(table), [4242]);
        assert_eq!(socket_inode("socket:[4242]"), Some(4242));
        assert_eq!(socket_inode("pipe:[1]"), None);
    }

    #[test]
    fn sees_own_tree_and_listener() -> std::io::Result<()> {
        let me = std::process::id();
        assert_eq!(process_tree(me).first(), Some(&me));
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        assert!(holds_listening_socket(me));
        drop(listener);
        Ok(())
    }
}
