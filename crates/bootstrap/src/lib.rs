//! `apiway bootstrap`: what an installer needs for cluster-owned API load
//! balancers (the OpenShift proposal "Kubernetes Service owned API load
//! balancers"):
//!
//! - [`render`]: the `Service type: LoadBalancer` manifests per cloud,
//!   pinned to the reserved addresses;
//! - [`wait`]: until every Service has an ingress and a ready endpoint;
//! - [`dns`]: the records of each bootstrap stage.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod dns;
pub mod render;
pub mod wait;
