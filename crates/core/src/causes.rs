//! An error said with its causes.

/// `error` and each of its sources, `: `-separated, each said only once (a
/// source whose text the message so far already holds is skipped: hyper,
/// rustls and kube often repeat their cause in their own message, or say
/// no more than "connection error" without it).
pub fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn each_cause_said_once() {
        let e = E(
            "connection error",
            Some(Box::new(E(
                "tls: refused: alert",
                Some(Box::new(E("alert", None))),
            ))),
        );
        assert_eq!(with_causes(&e), "connection error: tls: refused: alert");
        assert_eq!(with_causes(&E("alone", None)), "alone");
    }
}
