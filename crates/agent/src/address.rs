//! `--bind-address`: the agent owns the address it serves. Each address is
//! added as a host route (/32 or /128, scope host) to an interface, which
//! is created as a `dummy` link when missing, and removed again on exit
//! unless told to keep it.

use std::net::IpAddr;

use rustix::io::Errno;

use crate::netlink::{self, Netlink};

/// Where the addresses go and whether they stay after exit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressSpec {
    /// Addresses to add.
    pub addresses: Vec<IpAddr>,
    /// The interface (created as a `dummy` link when missing).
    pub interface: String,
    /// Leave the addresses (and a created link) in place on exit.
    pub keep: bool,
}

/// Why an address could not be set up; the message is one line that names
/// the flag and the fix.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    /// The process lacks CAP_NET_ADMIN.
    #[error("--bind-address {address}: adding it to {interface} needs CAP_NET_ADMIN (run as root, or add the NET_ADMIN capability: securityContext.capabilities.add: [NET_ADMIN] / AmbientCapabilities=CAP_NET_ADMIN), or leave out --bind-address and assign the address yourself")]
    NoPermission {
        /// The address.
        address: IpAddr,
        /// The interface.
        interface: String,
    },
    /// The interface is missing and this kernel cannot create a dummy link.
    #[error("--interface {interface}: no such interface, and this kernel has no `dummy` link type to create it; use --interface lo")]
    NoDummy {
        /// The interface.
        interface: String,
    },
    /// Anything else the kernel refused.
    #[error("--bind-address {address} on --interface {interface}: {action} failed: {errno}")]
    Kernel {
        /// The address.
        address: IpAddr,
        /// The interface.
        interface: String,
        /// What was attempted.
        action: &'static str,
        /// What the kernel said.
        errno: Errno,
    },
}

/// Addresses added by the agent; [`LocalAddresses::release`] (or drop)
/// removes them unless `keep` was asked for.
#[derive(Debug)]
pub struct LocalAddresses {
    spec: AddressSpec,
    index: u32,
    added: Vec<IpAddr>,
    created_link: bool,
}

impl LocalAddresses {
    /// Adds every address of `spec`. An address already present is fine
    /// (the agent restarted, or an operator added it); it is still owned
    /// and removed on exit unless `keep`.
    pub fn add(spec: &AddressSpec) -> Result<LocalAddresses, AddressError> {
        let mut owned = LocalAddresses {
            spec: spec.clone(),
            index: 0,
            added: Vec::new(),
            created_link: false,
        };
        if spec.addresses.is_empty() {
            return Ok(owned);
        }
        let first = spec.addresses[0];
        let fail = |address: IpAddr, action: &'static str, errno: Errno| {
            explain(address, &spec.interface, action, errno)
        };
        let mut nl = Netlink::open().map_err(|e| fail(first, "opening a netlink socket", e))?;
        owned.index = match Netlink::index_of(&spec.interface) {
            Ok(i) => i,
            Err(Errno::NODEV) => {
                let seq = nl.next_seq();
                nl.call(&netlink::create_dummy_request(&spec.interface, seq), seq)
                    .map_err(|e| fail(first, "creating the dummy interface", e))?;
                owned.created_link = true;
                tracing::info!(interface = %spec.interface, "created dummy interface");
                Netlink::index_of(&spec.interface)
                    .map_err(|e| fail(first, "finding the created interface", e))?
            }
            Err(e) => return Err(fail(first, "finding the interface", e)),
        };
        // A link we created starts down; lo is up already, and setting an
        // up link up again changes nothing.
        let seq = nl.next_seq();
        nl.call(&netlink::link_up_request(owned.index, seq), seq)
            .map_err(|e| fail(first, "setting the interface up", e))?;
        for &address in &spec.addresses {
            let seq = nl.next_seq();
            match nl.call(
                &netlink::address_request(true, owned.index, address, seq),
                seq,
            ) {
                Ok(()) => {
                    tracing::info!(%address, interface = %spec.interface, "address added");
                }
                Err(Errno::EXIST) => {
                    tracing::info!(%address, interface = %spec.interface, "address already present; owning it");
                }
                Err(e) => return Err(fail(address, "adding the address", e)),
            }
            owned.added.push(address);
        }
        Ok(owned)
    }

    /// Removes the addresses (and a link the agent created) unless `keep`.
    /// An address another process listens on at one of `listened` (this
    /// agent's listeners, closed by now) stays: that is the agent that
    /// replaces this one, started while this one drained.
    pub fn release(&mut self, listened: &[std::net::SocketAddr]) {
        if self.spec.keep {
            if !self.added.is_empty() {
                tracing::info!(interface = %self.spec.interface, addresses = ?self.added, "keeping the addresses (--keep-address)");
            }
            self.added.clear();
            return;
        }
        let added = std::mem::take(&mut self.added);
        if added.is_empty() && !self.created_link {
            return;
        }
        let mut nl = match Netlink::open() {
            Ok(nl) => nl,
            Err(e) => {
                tracing::warn!(error = %e, "cannot open a netlink socket; addresses stay");
                return;
            }
        };
        for address in added {
            if let Some(at) = listened
                .iter()
                .find(|l| l.ip() == address && apiway_core::listener::listened_elsewhere(**l))
            {
                tracing::info!(%address, listener = %at, interface = %self.spec.interface, "another process listens there (the next agent); keeping the address");
                continue;
            }
            let seq = nl.next_seq();
            match nl.call(
                &netlink::address_request(false, self.index, address, seq),
                seq,
            ) {
                Ok(()) | Err(Errno::ADDRNOTAVAIL) => {
                    tracing::info!(%address, interface = %self.spec.interface, "address removed")
                }
                Err(e) => {
                    tracing::warn!(%address, interface = %self.spec.interface, error = %e, "could not remove the address")
                }
            }
        }
        if std::mem::take(&mut self.created_link) {
            let seq = nl.next_seq();
            if let Err(e) = nl.call(&netlink::delete_link_request(self.index, seq), seq) {
                tracing::warn!(interface = %self.spec.interface, error = %e, "could not delete the dummy interface");
            }
        }
    }
}

impl Drop for LocalAddresses {
    fn drop(&mut self) {
        self.release(&[]);
    }
}

/// Turns a kernel error into the one line a user needs.
fn explain(address: IpAddr, interface: &str, action: &'static str, errno: Errno) -> AddressError {
    let interface = interface.to_owned();
    match errno {
        Errno::PERM | Errno::ACCESS => AddressError::NoPermission { address, interface },
        // EOPNOTSUPP from RTM_NEWLINK: the kernel knows no `dummy` type.
        Errno::OPNOTSUPP if action == "creating the dummy interface" => {
            AddressError::NoDummy { interface }
        }
        errno => AddressError::Kernel {
            address,
            interface,
            action,
            errno,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eperm_names_the_flag_and_the_fix() {
        let e = explain(
            "10.1.2.3".parse().unwrap(),
            "lo",
            "adding the address",
            Errno::PERM,
        )
        .to_string();
        assert!(e.contains("--bind-address 10.1.2.3"), "{e}");
        assert!(
            e.contains("CAP_NET_ADMIN") && e.contains("NET_ADMIN"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn missing_dummy_type_says_use_lo() {
        let e = explain(
            "10.1.2.3".parse().unwrap(),
            "apiway0",
            "creating the dummy interface",
            Errno::OPNOTSUPP,
        )
        .to_string();
        assert!(
            e.contains("--interface apiway0") && e.contains("use --interface lo"),
            "{e}"
        );
    }

    #[test]
    fn nothing_to_do_without_addresses() {
        let spec = AddressSpec {
            addresses: vec![],
            interface: "apiway0".into(),
            keep: false,
        };
        let mut a = LocalAddresses::add(&spec).unwrap();
        a.release(&[]);
    }
}
