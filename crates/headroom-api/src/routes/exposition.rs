//! `/metrics` cut to what one token may see: a series labelled with a pool or an account is
//! kept only for a token acting for that account; series that belong to no tenant (provider
//! calls, the loop itself) only for a token acting for every account.

use std::collections::BTreeMap;

/// Filters OpenMetrics text line by line. `visible(pool, account)` gets each sample's `pool`
/// and `account` labels; metadata lines (`# HELP`, `# TYPE`, `# UNIT`, `# EOF`) are kept.
pub(super) fn filter(
    text: &str,
    every_account: bool,
    visible: impl Fn(Option<&str>, Option<&str>) -> bool,
) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let keep = if line.starts_with('#') || line.is_empty() {
            true
        } else {
            let labels = labels(line);
            let pool = labels.get("pool").map(String::as_str);
            let account = labels.get("account").map(String::as_str);
            if pool.is_none() && account.is_none() {
                every_account
            } else {
                visible(pool, account)
            }
        };
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Whether a scraper's `Accept` header asks for OpenMetrics, as Prometheus's own does; anything
/// else (no header, `*/*`, `text/plain`) gets the 0.0.4 text format, as the Prometheus client
/// libraries answer.
pub(super) fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|part| {
            let mut params = part.split(';').map(str::trim);
            let media = params.next().unwrap_or_default();
            let refused = params.any(|p| p.replace(' ', "") == "q=0");
            media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
        })
    })
}

/// The same series in the Prometheus text format 0.0.4: no `# EOF` or `# UNIT` lines, no
/// exemplars, and a counter's `# HELP` and `# TYPE` named like its `_total` sample.
pub(super) fn to_text_004(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, "counter")) = rest.split_once(' ')
        {
            counters.insert(name.to_string());
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(&line),
            // An exemplar follows ` # ` after the value.
            None => out.push_str(line.split(" # ").next().unwrap_or(line)),
        }
        out.push('\n');
    }
    out
}

/// The labels of one sample line (`name{a="x",b="y"} value`); none when it has no braces.
fn labels(line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let Some(open) = line.find('{') else {
        return labels;
    };
    let mut rest = &line[open + 1..];
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if rest.starts_with('}') || rest.is_empty() {
            return labels;
        }
        let Some((name, after)) = rest.split_once("=\"") else {
            return labels;
        };
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(match escaped {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                other => value.push(other),
            }
        }
        labels.insert(name.trim().to_string(), value);
        rest = &after[end.min(after.len())..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_the_text_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(Some("text/plain;version=0.0.4")));
        assert!(!wants_openmetrics(Some("application/openmetrics-text;q=0")));
        let om = "# HELP headroom_decisions Decisions.\n# TYPE headroom_decisions counter\nheadroom_decisions_total{rule=\"hold\"} 3 # {trace_id=\"abc\"} 1.0\n# HELP headroom_up Up.\n# TYPE headroom_up gauge\n# UNIT headroom_up seconds\nheadroom_up 1\n# EOF\n";
        assert_eq!(
            to_text_004(om),
            "# HELP headroom_decisions_total Decisions.\n# TYPE headroom_decisions_total counter\nheadroom_decisions_total{rule=\"hold\"} 3\n# HELP headroom_up Up.\n# TYPE headroom_up gauge\nheadroom_up 1\n"
        );
    }

    const TEXT: &str = "# HELP headroom_replicas Replicas.\n\
# TYPE headroom_replicas gauge\n\
headroom_replicas{pool=\"llama\",state=\"ready\"} 2\n\
headroom_replicas{pool=\"mistral\",state=\"ready\"} 1\n\
headroom_budget_spent_dollars{account=\"team-b\"} 3.5\n\
headroom_provider_call_seconds_count{provider=\"sim\",call=\"launch\"} 9\n\
weird{note=\"a \\\"pool=\\\\\\\"llama\\\\\\\"\\\" b\",pool=\"mistral\"} 1\n\
# EOF\n";

    #[test]
    fn a_tenant_sees_its_own_series_and_the_metadata_only() {
        let out = filter(TEXT, false, |pool, account| {
            pool == Some("llama") || account == Some("ml")
        });
        assert_eq!(
            out,
            "# HELP headroom_replicas Replicas.\n\
# TYPE headroom_replicas gauge\n\
headroom_replicas{pool=\"llama\",state=\"ready\"} 2\n\
# EOF\n"
        );
        let all = filter(TEXT, true, |_, _| true);
        assert_eq!(all, TEXT);
    }

    #[test]
    fn quoted_label_values_do_not_fool_the_parser() {
        let line = "weird{note=\"a \\\"pool=\\\\\\\"llama\\\\\\\"\\\" b\",pool=\"mistral\"} 1";
        let labels = labels(line);
        assert_eq!(labels.get("pool").map(String::as_str), Some("mistral"));
    }
}
