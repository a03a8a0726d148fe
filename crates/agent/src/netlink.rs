//! A few rtnetlink requests, built and parsed here: add or remove one host
//! address on an interface, create a `dummy` link and set it up.
//!
//! The messages are small enough that a netlink crate would cost more than
//! it saves; everything is safe code over rustix. Requests are synchronous
//! (they run once at start and once at exit) and bounded by a receive
//! timeout.

use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::io::Errno;
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

const NLMSG_ERROR: u16 = 2;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
/// No duplicate address detection: an IPv6 address is usable at once
/// instead of staying "tentative" (unbindable) for a second or more.
const IFA_F_NODAD: u8 = 0x02;
const RT_SCOPE_HOST: u8 = 254;

const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const NLA_F_NESTED: u16 = 0x8000;
const IFF_UP: u32 = 0x1;

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const AF_UNSPEC: u8 = 0;

/// How long the kernel gets to answer a request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Appends one attribute (type, value, padding to 4 bytes).
fn attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Wraps `payload` in a netlink header.
fn message(kind: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + payload.len());
    out.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(payload);
    out
}

/// `RTM_NEWADDR` (or `RTM_DELADDR`) of `ip` as a host route (/32 or /128,
/// scope host) on interface `index`.
pub(crate) fn address_request(add: bool, index: u32, ip: IpAddr, seq: u32) -> Vec<u8> {
    let (family, bytes, prefix): (u8, Vec<u8>, u8) = match ip {
        IpAddr::V4(v4) => (AF_INET, v4.octets().to_vec(), 32),
        IpAddr::V6(v6) => (AF_INET6, v6.octets().to_vec(), 128),
    };
    let flags = if ip.is_ipv6() { IFA_F_NODAD } else { 0 };
    let mut payload = vec![family, prefix, flags, RT_SCOPE_HOST];
    payload.extend_from_slice(&index.to_ne_bytes());
    attr(&mut payload, IFA_LOCAL, &bytes);
    attr(&mut payload, IFA_ADDRESS, &bytes);
    let (kind, flags) = if add {
        (
            RTM_NEWADDR,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
    } else {
        (RTM_DELADDR, NLM_F_REQUEST | NLM_F_ACK)
    };
    message(kind, flags, seq, &payload)
}

fn ifinfo(index: u32, flags: u32, change: u32) -> Vec<u8> {
    let mut payload = vec![AF_UNSPEC, 0, 0, 0];
    payload.extend_from_slice(&index.to_ne_bytes());
    payload.extend_from_slice(&flags.to_ne_bytes());
    payload.extend_from_slice(&change.to_ne_bytes());
    payload
}

/// `RTM_NEWLINK` creating a `dummy` link named `name`.
pub(crate) fn create_dummy_request(name: &str, seq: u32) -> Vec<u8> {
    let mut payload = ifinfo(0, 0, 0);
    let mut cname = name.as_bytes().to_vec();
    cname.push(0);
    attr(&mut payload, IFLA_IFNAME, &cname);
    let mut info = Vec::new();
    attr(&mut info, IFLA_INFO_KIND, b"dummy");
    attr(&mut payload, IFLA_LINKINFO | NLA_F_NESTED, &info);
    message(
        RTM_NEWLINK,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        seq,
        &payload,
    )
}

/// `RTM_NEWLINK` setting interface `index` up.
pub(crate) fn link_up_request(index: u32, seq: u32) -> Vec<u8> {
    message(
        RTM_NEWLINK,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        &ifinfo(index, IFF_UP, IFF_UP),
    )
}

/// `RTM_DELLINK` of interface `index`.
pub(crate) fn delete_link_request(index: u32, seq: u32) -> Vec<u8> {
    message(
        RTM_DELLINK,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        &ifinfo(index, 0, 0),
    )
}

/// The kernel's answer to a request with `NLM_F_ACK`: `Ok` for an ack,
/// the errno it reported, or `None` if `buf` holds no answer to `seq`.
pub(crate) fn parse_ack(buf: &[u8], seq: u32) -> Option<Result<(), Errno>> {
    let mut rest = buf;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes(rest[0..4].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(rest[4..6].try_into().ok()?);
        let got_seq = u32::from_ne_bytes(rest[8..12].try_into().ok()?);
        if len < 16 || len > rest.len() {
            return None;
        }
        if kind == NLMSG_ERROR && got_seq == seq && len >= 20 {
            let code = i32::from_ne_bytes(rest[16..20].try_into().ok()?);
            return Some(if code == 0 {
                Ok(())
            } else {
                Err(Errno::from_raw_os_error(-code))
            });
        }
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
    None
}

/// A route netlink socket.
pub(crate) struct Netlink {
    fd: OwnedFd,
    seq: u32,
}

impl Netlink {
    pub(crate) fn open() -> Result<Netlink, Errno> {
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            None,
        )?;
        rustix::net::sockopt::set_socket_timeout(
            &fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(ANSWER_TIMEOUT),
        )?;
        Ok(Netlink { fd, seq: 1 })
    }

    pub(crate) fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends `request` (built with sequence number `seq`) and waits for the
    /// kernel's ack.
    pub(crate) fn call(&mut self, request: &[u8], seq: u32) -> Result<(), Errno> {
        rustix::net::sendto(
            &self.fd,
            request,
            SendFlags::empty(),
            &SocketAddrNetlink::new(0, 0),
        )?;
        let mut buf = vec![0u8; 8192];
        loop {
            let (n, _) = rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::empty())?;
            if let Some(answer) = parse_ack(&buf[..n], seq) {
                return answer;
            }
        }
    }

    /// The index of interface `name`.
    pub(crate) fn index_of(name: &str) -> Result<u32, Errno> {
        let probe = rustix::net::socket_with(
            AddressFamily::INET,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        rustix::net::netdevice::name_to_index(&probe, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_request_layout() {
        let m = address_request(true, 1, "10.1.2.3".parse().unwrap(), 7);
        // header 16 + ifaddrmsg 8 + two 8-byte attributes.
        assert_eq!(m.len(), 40);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 40);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), RTM_NEWADDR);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 7);
        assert_eq!(&m[16..20], &[AF_INET, 32, 0, RT_SCOPE_HOST]);
        assert_eq!(u32::from_ne_bytes(m[20..24].try_into().unwrap()), 1);
        assert_eq!(&m[28..32], &[10, 1, 2, 3]);
        assert_eq!(&m[36..40], &[10, 1, 2, 3]);
        let v6 = address_request(false, 2, "fd00::1".parse().unwrap(), 8);
        assert_eq!(v6.len(), 16 + 8 + 20 + 20);
        assert_eq!(
            u16::from_ne_bytes(v6[4..6].try_into().unwrap()),
            RTM_DELADDR
        );
        assert_eq!(&v6[16..20], &[AF_INET6, 128, IFA_F_NODAD, RT_SCOPE_HOST]);
    }

    #[test]
    fn dummy_request_nests_the_kind() {
        let m = create_dummy_request("apiway0", 3);
        let len = u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize;
        assert_eq!(len, m.len());
        assert_eq!(len % 4, 0);
        let tail = &m[32..];
        assert_eq!(&tail[4..12], b"apiway0\0");
        assert!(m.windows(5).any(|w| w == b"dummy"));
    }

    #[test]
    fn parses_acks_and_errors() {
        let mut ack = message(NLMSG_ERROR, 0, 9, &0i32.to_ne_bytes());
        ack.extend_from_slice(&[0; 16]);
        assert_eq!(parse_ack(&ack, 9), Some(Ok(())));
        assert_eq!(parse_ack(&ack, 10), None);
        let err = message(NLMSG_ERROR, 0, 9, &(-1i32).to_ne_bytes());
        assert_eq!(parse_ack(&err, 9), Some(Err(Errno::PERM)));
        assert_eq!(parse_ack(&[1, 2, 3], 9), None);
        let bogus = message(NLMSG_ERROR, 0, 9, &[]);
        assert_eq!(parse_ack(&bogus, 9), None);
    }
}
