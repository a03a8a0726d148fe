//! The response body type the stand-in's routes and its upstream proxy
//! share.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;

/// Any error a body may fail with.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A response body.
pub(crate) type Body = BoxBody<Bytes, BoxError>;
