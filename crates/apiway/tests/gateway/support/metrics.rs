//! Reading series out of the Prometheus text the admin endpoint serves.

/// One scrape of `/metrics`.
pub struct Metrics {
    text: String,
}

impl Metrics {
    pub fn new(text: String) -> Metrics {
        Metrics { text }
    }

    /// The value of the first series named `name` whose labels include every
    /// `(key, value)` of `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.text.lines().find_map(|line| {
            if line.starts_with('#') {
                return None;
            }
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, label_text) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            if series_name != name {
                return None;
            }
            let present: Vec<&str> = label_text.split(',').collect();
            let all = labels
                .iter()
                .all(|(k, v)| present.contains(&format!("{k}=\"{v}\"").as_str()));
            if all {
                value.parse().ok()
            } else {
                None
            }
        })
    }

    /// Like [`value`](Self::value), 0 when the series does not exist (a
    /// counter that was never touched).
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels).unwrap_or(0.0)
    }

    /// The lines starting with `prefix`, for error messages.
    pub fn matching(&self, prefix: &str) -> String {
        self.text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect::<Vec<_>>()
            .join("\n")
    }
}
