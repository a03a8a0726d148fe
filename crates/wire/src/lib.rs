//! Sans-IO codecs: bytes in, typed values or typed errors out.
//!
//! Nothing here touches a socket, spawns a task or reads a clock, so every
//! parser can be driven byte by byte in tests and fuzzed.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod altsvc;
pub mod authority;
pub mod connect;
pub mod connect_response;
pub mod decode;
pub mod endpointslice;
pub mod kube_patch;
pub mod proxy;
pub mod sni;
pub mod token_file;
pub mod tunnel;
