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
