//! PROXY protocol v1 and v2 headers: parsing and rendering.
