//! Fuzzes the Alt-Svc parser: it must never panic, a value that parses must
//! render to one that parses back to the same thing (and renders the same),
//! and the input cut into field lines at each `\n` must parse as the lines
//! joined with `", "` do, unless a quoted string was cut in two.
#![no_main]

use apiway_wire::altsvc::{parse, parse_lines, AltSvc, AltSvcError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let whole = parse(&text);
    check_round_trip(&whole);

    let lines: Vec<&str> = text.split('\n').collect();
    let by_lines = parse_lines(lines.iter().copied());
    check_round_trip(&by_lines);
    if !matches!(by_lines, Err(AltSvcError::UnterminatedQuote { .. })) {
        assert_eq!(by_lines, parse(&lines.join(", ")), "{lines:?}");
    }
});

fn check_round_trip(result: &Result<AltSvc, AltSvcError>) {
    let Ok(value) = result else { return };
    if let AltSvc::Alternatives(list) = value {
        assert!(!list.is_empty());
    }
    let rendered = value.render();
    let again = parse(&rendered);
    assert_eq!(again.as_ref(), Ok(value), "{rendered:?}");
    assert_eq!(again.map(|v| v.render()), Ok(rendered));
}
