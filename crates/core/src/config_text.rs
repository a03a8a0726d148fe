//! Reads a configuration file's text into a typed value: YAML, with a fast
//! path for JSON.
//!
//! Every JSON document is also a YAML document, and tools that generate
//! large configurations (controllers rendering thousands of routes) usually
//! write JSON. A YAML parser handles it correctly but at a few MB/s; a JSON
//! parser is an order of magnitude faster. A text whose first non-blank
//! character is `{` is therefore read as JSON; anything else as YAML.

use serde::de::DeserializeOwned;

/// Deserializes `text` (YAML, or JSON when it starts with `{`). The error is
/// one line naming the problem and where it is.
pub fn deserialize<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))
    } else {
        serde_saphyr::from_str(text)
            .map_err(|e| format!("invalid YAML: {}", one_line(&e.to_string())))
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
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
    fn errors_name_the_format_and_stay_on_one_line() {
        let e = deserialize::<Sample>("{\"name\": \"a\", \"typo\": 1}").unwrap_err();
        assert!(e.starts_with("invalid JSON") && e.contains("typo"), "{e}");
        let e = deserialize::<Sample>("name: a\ntypo: 1\n").unwrap_err();
        assert!(e.starts_with("invalid YAML") && e.contains("typo"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
