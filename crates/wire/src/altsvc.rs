//! Alt-Svc (RFC 7838) header values: parsing and rendering.
