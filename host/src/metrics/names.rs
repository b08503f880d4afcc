//! Label values from a closed set (never a workflow's id or a guest's text), and the text
//! format Prometheus' own tools read.

use std::collections::HashSet;

use wfhost_scheduler::FailureKind;

use wfhost_store::Ending;

/// How a workflow ended, as a label: `completed`, or the failure's kind (`failed`, `trap`,
/// `cancelled`, ...); `other` for a kind this build does not know.
pub(crate) fn ending_outcome(ending: &Ending) -> &'static str {
    match ending {
        Ending::Done(_) => "completed",
        Ending::Failed { kind, .. } => {
            FailureKind::from_name(kind).map_or("other", FailureKind::name)
        }
    }
}

/// How a host function call ended, as a label: `ok`, or its error's kind (`timeout`,
/// `not-allowed`, ...); for an outbound HTTP call (`wfhost.http`) that got a response, its
/// status class (`2xx`, `3xx`, `4xx`, `5xx`), so that a 500 is not counted as a success.
pub(crate) fn call_outcome(
    function: &str,
    result: &Result<wfcontract::Payload, wfcontract::CommandError>,
) -> &'static str {
    match result {
        Ok(payload) if function == wfcontract::builtin::HTTP_FUNCTION => {
            /// A response's status, without the rest of it.
            #[derive(serde::Deserialize)]
            struct Status {
                status: u16,
            }
            match payload.decode::<Status>().map(|s| s.status / 100) {
                Ok(1) => "1xx",
                Ok(2) => "2xx",
                Ok(3) => "3xx",
                Ok(4) => "4xx",
                Ok(5) => "5xx",
                _ => "ok",
            }
        }
        Ok(_) => "ok",
        Err(error) => error.kind.name(),
    }
}

/// The OpenMetrics text `open`, in Prometheus' text format (0.0.4): a counter's help and type
/// lines name it as its samples do (with `_total`), and the unit and end-of-file lines go.
/// Everything else is the same in both.
pub(crate) fn to_text_format(open: &str) -> String {
    let counters: HashSet<&str> = open
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut text = String::with_capacity(open.len() + counters.len() * 16);
    for line in open.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find(|prefix| line.starts_with(prefix));
        match meta {
            Some(prefix) => {
                let rest = &line[prefix.len()..];
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                text.push_str(prefix);
                text.push_str(name);
                if counters.contains(name) {
                    text.push_str("_total");
                }
                text.push(' ');
                text.push_str(tail);
            }
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_as_their_samples() {
        let open = "# HELP a_b Things.\n# TYPE a_b counter\na_b_total 3\n\
                    # HELP c Level.\n# TYPE c gauge\n# UNIT c bytes\nc 1\n# EOF\n";
        assert_eq!(
            to_text_format(open),
            "# HELP a_b_total Things.\n# TYPE a_b_total counter\na_b_total 3\n\
             # HELP c Level.\n# TYPE c gauge\nc 1\n"
        );
    }

    #[test]
    fn endings_are_a_closed_set() {
        assert_eq!(ending_outcome(&Ending::Done(vec![])), "completed");
        let failed = |kind: &str| Ending::Failed {
            kind: kind.into(),
            message: "x".into(),
        };
        assert_eq!(ending_outcome(&failed("cancelled")), "cancelled");
        assert_eq!(ending_outcome(&failed("whatever a store says")), "other");
    }
}
