//! Configuration shared by every role: the sections every role's file and
//! flags use ([`sections`]), and the seam that feeds a role typed snapshots
//! from one or more sources ([`source`]).
//!
//! A role's configuration flows one way:
//!
//! ```text
//! sources (file, flags, Kubernetes…) ─▶ fragments ─▶ Merge ─▶ typed spec
//!     ─▶ Role::validate ─▶ snapshot ─▶ runtime applies it atomically
//! ```
//!
//! A source turns whatever it reads into the role's typed spec fragment
//! (never into YAML text); validation works on that typed value, so a file, a
//! command line and a Kubernetes watch are checked by the same code.

pub mod sections;
pub mod source;

pub use sections::{AdminSection, Common, DrainSection, KubernetesArgs};
pub use source::{FileSource, Merge, Source, SourceEvent, SourceSender, StaticSource};

/// A typed value with the text it was written as, so that an error found
/// later (a duplicate, a conflict) quotes what the user wrote. A source
/// that has no text (Kubernetes) uses the value's own rendering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written<T> {
    /// The parsed value.
    pub value: T,
    /// How it was written.
    pub text: String,
}

impl<T> Written<T> {
    /// `value`, written as `text`.
    pub fn new(value: T, text: impl Into<String>) -> Written<T> {
        Written {
            value,
            text: text.into(),
        }
    }
}

impl<T> std::fmt::Display for Written<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}
