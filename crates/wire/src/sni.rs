//! TLS ClientHello parsing: finds the SNI without terminating TLS.
