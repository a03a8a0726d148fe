//! Where the client's endpoint choice lived before the endpoint model; it
//! is [`crate::endpoint::choice`] now.

pub use crate::endpoint::choice::{Block, ChoicePolicy, EndpointChoice, Failure, Listed};
