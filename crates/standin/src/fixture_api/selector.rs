//! Label and field selectors, the subset kube-rs, client-go and kubectl
//! send: comma-joined `key=value`, `key==value`, `key!=value`, `key` and
//! `!key` terms (set-based `in`/`notin` are not supported and rejected).

use serde_json::Value;

/// One term of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// A parsed selector: every term must hold (an empty selector matches
/// everything).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    terms: Vec<Term>,
}

impl Selector {
    /// Parses a selector as it appears in a query, already percent-decoded.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut terms = Vec::new();
        for raw in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let term = if let Some((k, v)) = raw.split_once("!=") {
                Term::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = raw.split_once("==") {
                Term::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = raw.split_once('=') {
                Term::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some(k) = raw.strip_prefix('!') {
                Term::Absent(k.trim().to_owned())
            } else if raw.contains(' ') || raw.contains('(') {
                return Err(format!("unsupported selector term `{raw}`"));
            } else {
                Term::Exists(raw.to_owned())
            };
            terms.push(term);
        }
        Ok(Selector { terms })
    }

    /// Whether `lookup` (key to value) satisfies every term.
    fn matches_with<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.terms.iter().all(|term| match term {
            Term::Equals(k, v) => lookup(k) == Some(v.as_str()),
            Term::NotEquals(k, v) => lookup(k) != Some(v.as_str()),
            Term::Exists(k) => lookup(k).is_some(),
            Term::Absent(k) => lookup(k).is_none(),
        })
    }

    /// Whether `object`'s `metadata.labels` match.
    pub fn matches_labels(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.matches_with(|k| labels.get(k).and_then(Value::as_str))
    }

    /// Whether `object` matches as a field selector; only `metadata.name`
    /// and `metadata.namespace` are fields here.
    pub fn matches_fields(&self, object: &Value) -> bool {
        self.matches_with(|k| match k {
            "metadata.name" | "metadata.namespace" => {
                let field = k.trim_start_matches("metadata.");
                object["metadata"].get(field).and_then(Value::as_str)
            }
            _ => None,
        })
    }

    /// Rejects fields other than `metadata.name` and `metadata.namespace`,
    /// as the API server rejects fields a resource does not index.
    pub fn check_fields(&self) -> Result<(), String> {
        for term in &self.terms {
            let (Term::Equals(k, _) | Term::NotEquals(k, _) | Term::Exists(k) | Term::Absent(k)) =
                term;
            if k != "metadata.name" && k != "metadata.namespace" {
                return Err(format!("field label not supported: {k}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_terms() {
        let pod = json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "front"}}});
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("tier", true),
            ("!tier", false),
            ("missing!=x", true),
            ("!missing", true),
        ];
        for (text, expected) in cases {
            let selector = Selector::parse(text).expect("parses");
            assert_eq!(selector.matches_labels(&pod), expected, "{text}");
        }
        assert!(Selector::parse("app in (web)").is_err());
    }

    #[test]
    fn field_terms() {
        let pod = json!({"metadata": {"name": "a", "namespace": "ns"}});
        let selector = Selector::parse("metadata.name=a").expect("parses");
        assert!(selector.check_fields().is_ok());
        assert!(selector.matches_fields(&pod));
        assert!(!Selector::parse("metadata.name=b")
            .expect("parses")
            .matches_fields(&pod));
        assert!(
            Selector::parse("metadata.namespace!=other,metadata.name==a")
                .expect("parses")
                .matches_fields(&pod)
        );
        assert!(Selector::parse("spec.nodeName=n1")
            .expect("parses")
            .check_fields()
            .is_err());
    }
}
