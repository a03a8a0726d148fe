//! Where core's one selection order lived before the endpoint model; it
//! is [`crate::endpoint::select`] now.

pub use crate::endpoint::select::{best, Candidate};
