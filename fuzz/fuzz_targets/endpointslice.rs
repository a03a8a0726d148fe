//! Fuzzes the EndpointSlice decoders: neither may panic on any bytes, fed
//! whole (as a list body and as one event line) and cut at each `\n` (as a
//! watch body is); whatever decodes must pass the checks the wire crate's
//! property tests apply (re-encodes to JSON that decodes to the same value;
//! ready addresses are IPs of the slice's family, of ready endpoints, at
//! its `https` port).
#![no_main]

use libfuzzer_sys::fuzz_target;

// One set of checks for the fuzzer and the property tests.
#[path = "../../crates/wire/tests/endpointslice_checks/mod.rs"]
mod endpointslice_checks;

use endpointslice_checks::{check_event, check_list};

fuzz_target!(|data: &[u8]| {
    check_list(data);
    check_event(data);
    for line in data.split(|b| *b == b'\n') {
        check_event(line.trim_ascii());
    }
});
