//! Spot availability replayed from a file in the format of the public SkyPilot spot traces:
//! `{"metadata": {"gap_seconds": N, ...}, "data": [available, ...]}`, one file per offering,
//! each count how many instances the market would run for the `gap_seconds` it covers. A count
//! that falls reclaims what runs above it, with the usual notice, as a wave of interruptions
//! does; launches past it are refused for capacity.

use std::path::Path;

use headroom_core::OfferingId;
use serde::Deserialize;

use crate::SimError;
use crate::scenario::{Fault, FaultKind, Scenario};

/// The most samples a trace may hold: a year of one-minute samples, far beyond any run.
const MOST_SAMPLES: usize = 366 * 24 * 60;

#[derive(Debug, Deserialize)]
struct RawTrace {
    metadata: Metadata,
    data: Vec<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct Metadata {
    gap_seconds: f64,
}

/// One offering's availability: a count every `gap_s` seconds from the run's start.
#[derive(Debug, Clone, PartialEq)]
pub struct SpotTrace {
    pub offering: OfferingId,
    pub gap_s: f64,
    pub available: Vec<u32>,
}

impl SpotTrace {
    /// Parses `text` (read from `file`, named in errors) as the availability of `offering`.
    pub fn parse(file: &str, offering: OfferingId, text: &str) -> Result<SpotTrace, SimError> {
        let bad = |message: String| SimError::Trace {
            file: file.to_string(),
            message,
        };
        let raw: RawTrace = serde_json::from_str(text).map_err(|e| {
            bad(format!(
                "{e}; expected {{\"metadata\": {{\"gap_seconds\": N}}, \"data\": [counts...]}}"
            ))
        })?;
        let gap_s = raw.metadata.gap_seconds;
        if !(gap_s.is_finite() && (1.0..=86_400.0).contains(&gap_s)) {
            return Err(bad(format!(
                "metadata.gap_seconds: {gap_s} is not between 1 and 86400; give the seconds each count covers"
            )));
        }
        if raw.data.is_empty() || raw.data.len() > MOST_SAMPLES {
            return Err(bad(format!(
                "data: {} counts; give between 1 and {MOST_SAMPLES}",
                raw.data.len()
            )));
        }
        let available = raw
            .data
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        bad(format!(
                            "data[{i}]: {v} is not a count of instances; use a whole number from 0"
                        ))
                    })
            })
            .collect::<Result<Vec<u32>, SimError>>()?;
        Ok(SpotTrace {
            offering,
            gap_s,
            available,
        })
    }

    /// Reads `OFFERING=FILE` (the `--spot-trace` argument) for `scenario`: the offering must be
    /// one of its spot offerings.
    pub fn read(spec: &str, scenario: &Scenario) -> Result<SpotTrace, SimError> {
        let bad = |message: String| SimError::Trace {
            file: spec.to_string(),
            message,
        };
        let (offering, file) = spec.split_once('=').ok_or_else(|| {
            bad("write OFFERING=FILE, e.g. use1-p4d-spot=traces/p4d-use1a.json".to_string())
        })?;
        let id: OfferingId = offering.parse().map_err(|e| bad(format!("{e}")))?;
        let spot = scenario
            .config
            .offering(&id)
            .is_some_and(|o| o.market == headroom_core::Market::Spot);
        if !spot {
            return Err(bad(format!(
                "{offering} is not a spot offering of the scenario; name one of its spot offerings"
            )));
        }
        let text = std::fs::read_to_string(Path::new(file)).map_err(|e| bad(e.to_string()))?;
        SpotTrace::parse(file, id, &text)
    }

    /// The faults that replay it over a run of `duration_s`: one each time the count changes
    /// (the first at the start), the last count holding to the end.
    pub fn faults(&self, duration_s: f64) -> Vec<Fault> {
        let mut faults = Vec::new();
        let mut last = None;
        for (i, n) in self.available.iter().enumerate() {
            let at_s = i as f64 * self.gap_s;
            if at_s >= duration_s {
                break;
            }
            if last != Some(*n) {
                faults.push(Fault {
                    at_s,
                    offering: self.offering.clone(),
                    kind: FaultKind::Available(*n),
                });
                last = Some(*n);
            }
        }
        faults
    }
}

/// Adds `traces` to `scenario`'s faults, in time order; a trace replaces the scenario's own
/// capacity and interruption faults on its offering (the trace is that market's history).
pub fn apply(scenario: &mut Scenario, traces: &[SpotTrace]) {
    for trace in traces {
        scenario.faults.retain(|f| {
            f.offering != trace.offering
                || !matches!(
                    f.kind,
                    FaultKind::Capacity(_) | FaultKind::Interrupt(_) | FaultKind::Available(_)
                )
        });
        scenario.faults.extend(trace.faults(scenario.duration_s));
    }
    scenario.faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> OfferingId {
        "use1-p4d-spot".parse().unwrap()
    }

    #[test]
    fn a_trace_becomes_one_fault_per_change_of_count_within_the_run() {
        let text = r#"{"metadata": {"gap_seconds": 600, "zone": "us-east-1a"}, "data": [4, 4, 2, 2, 0, 3, 3]}"#;
        let trace = SpotTrace::parse("t.json", id(), text).unwrap();
        let faults = trace.faults(3000.0);
        let got: Vec<(f64, FaultKind)> = faults.iter().map(|f| (f.at_s, f.kind.clone())).collect();
        assert_eq!(
            got,
            vec![
                (0.0, FaultKind::Available(4)),
                (1200.0, FaultKind::Available(2)),
                (2400.0, FaultKind::Available(0)),
            ],
            "counts past the run's end are not replayed"
        );
    }

    #[test]
    fn a_malformed_trace_is_refused_naming_the_field() {
        for (text, field) in [
            (r#"{"data": [1]}"#, "metadata"),
            (
                r#"{"metadata": {"gap_seconds": 0}, "data": [1]}"#,
                "gap_seconds",
            ),
            (
                r#"{"metadata": {"gap_seconds": 60}, "data": []}"#,
                "data: 0 counts",
            ),
            (
                r#"{"metadata": {"gap_seconds": 60}, "data": [1, -2]}"#,
                "data[1]",
            ),
            (
                r#"{"metadata": {"gap_seconds": 60}, "data": [1, 0.5]}"#,
                "data[1]",
            ),
        ] {
            let e = SpotTrace::parse("t.json", id(), text)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("t.json: "), "{e}");
            assert!(e.contains(field), "{text}: {e}");
        }
    }
}
