//! Durations in configuration files, written the way operators write them:
//! `500ms`, `1s`, `2m30s`.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Parses a human duration such as `1s` or `250ms`.
pub fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("`{text}` is not a duration ({e}); write it like `500ms`, `1s` or `2m`")
    })
}

/// Serde adapter: `#[serde(with = "apiway_core::duration")]`.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse(&text).map_err(serde::de::Error::custom)
}

/// Serde adapter for optional durations: `#[serde(default, with = "apiway_core::duration::option")]`.
pub mod option {
    use super::*;

    /// Deserializes an optional duration; `null` or absent means `None`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        match text {
            None => Ok(None),
            Some(t) => super::parse(&t).map(Some).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse(" 2m "), Ok(Duration::from_secs(120)));
        assert!(parse("soon")
            .unwrap_err()
            .contains("`soon` is not a duration"));
    }
}
