//! Reads a configuration file's text into a typed value: YAML, with a fast
//! path for JSON.
//!
//! Every JSON document is also a YAML document, and tools that generate
//! large configurations (controllers rendering thousands of routes) usually
//! write JSON. A YAML parser handles it correctly but at a few MB/s; a JSON
//! parser is an order of magnitude faster. A text whose first non-blank
//! character is `{` is therefore read as JSON; anything else as YAML.

use serde::de::DeserializeOwned;

/// How the parser names the text in its report; [`name_source`] puts the
/// file's name in its place.
pub const UNNAMED_SOURCE: &str = "<input>";

/// Deserializes `text` (YAML, or JSON when it starts with `{`). The error
/// says which kind it is (`invalid YAML`/`invalid JSON` for text that does
/// not parse, `invalid configuration` for a well-formed document that does
/// not fit the schema: an unknown field, a wrong type) and, for YAML,
/// carries the parser's multi-line report with the lines around the place.
pub fn deserialize<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| {
            let kind = match e.classify() {
                serde_json::error::Category::Data => "invalid configuration",
                _ => "invalid JSON",
            };
            format!("{kind}: {e}")
        })
    } else {
        serde_saphyr::from_str(text).map_err(|e| {
            let report = e.to_string();
            let report = report.strip_prefix("error: ").unwrap_or(&report);
            format!("{}: {}", yaml_kind(&e), report.trim_end())
        })
    }
}

/// Replaces the parser's name for the text by `name` (the file's path).
pub fn name_source(error: &str, name: &str) -> String {
    error.replace(UNNAMED_SOURCE, name)
}

/// `invalid configuration` when the YAML parsed and the schema refused it.
fn yaml_kind(e: &serde_saphyr::Error) -> &'static str {
    use serde_saphyr::Error as E;
    match e.without_snippet() {
        E::Message { .. }
        | E::SerdeInvalidType { .. }
        | E::SerdeInvalidValue { .. }
        | E::SerdeInvalidLength { .. }
        | E::SerdeUnknownVariant { .. }
        | E::SerdeUnknownField { .. }
        | E::SerdeMissingField { .. }
        | E::DuplicateMappingKey { .. }
        | E::Unexpected { .. }
        | E::InvalidScalar { .. }
        | E::InvalidBooleanStrict { .. }
        | E::NullIntoString { .. }
        | E::NonFiniteFloat { .. }
        | E::InvalidCharNotSingleScalar { .. }
        | E::UnexpectedValueForUnit { .. }
        | E::UnexpectedValueForUnitEnumVariant { .. }
        | E::ExternallyTaggedEnumExpectedScalarOrMapping { .. } => "invalid configuration",
        _ => "invalid YAML",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        name: String,
        #[serde(default)]
        ports: Vec<u16>,
    }

    #[test]
    fn yaml_and_json_give_the_same_value() {
        let yaml: Sample = deserialize("name: a\nports: [1, 2]\n").unwrap();
        let json: Sample = deserialize("  {\"name\": \"a\", \"ports\": [1, 2]}").unwrap();
        let flow: Sample = deserialize("name: a\nports:\n  - 1\n  - 2\n").unwrap();
        assert_eq!(yaml, json);
        assert_eq!(yaml, flow);
    }

    #[test]
    fn errors_say_their_kind_and_where() {
        let e = deserialize::<Sample>("{\"name\": \"a\", \"typo\": 1}").unwrap_err();
        assert!(
            e.starts_with("invalid configuration") && e.contains("typo"),
            "{e}"
        );
        let e = deserialize::<Sample>("{\"name\": ").unwrap_err();
        assert!(e.starts_with("invalid JSON"), "{e}");
        // Valid YAML that the schema refuses is not "invalid YAML".
        let e = deserialize::<Sample>("name: a\ntypo: 1\n").unwrap_err();
        assert!(
            e.starts_with("invalid configuration") && e.contains("typo"),
            "{e}"
        );
        // The parser's report, with the lines around the place.
        assert!(e.contains('\n') && e.contains("typo: 1"), "{e}");
        let named = name_source(&e, "/etc/apiway/gateway.yaml");
        assert!(named.contains("/etc/apiway/gateway.yaml:2:"), "{named}");
        let e = deserialize::<Sample>("name: a: b\n").unwrap_err();
        assert!(e.starts_with("invalid YAML"), "{e}");
        let e = deserialize::<Sample>("name: a\nports: [x]\n").unwrap_err();
        assert!(e.starts_with("invalid configuration"), "{e}");
        let e = deserialize::<Sample>("name: a\nports: {a: 1}\n").unwrap_err();
        assert!(e.starts_with("invalid configuration"), "{e}");
    }
}
