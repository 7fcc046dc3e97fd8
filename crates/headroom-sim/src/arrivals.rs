//! Request arrivals: synthetic streams (a rate profile and an arrival process) and trace replay.

use std::path::Path;

use serde::Serialize;

use crate::error::SimError;

/// One request: when it arrives, its tokens, its priority tier (0 is the highest) and the
/// simulated pool it arrives at (an index into the scenario's pools; 0 is the first).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Request {
    pub at_s: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub tier: u8,
    pub pool: u8,
}

/// How arrivals are spaced at a given rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// Evenly spaced: the rate's integral crossing each whole number (the seeds' arithmetic).
    Uniform,
    /// A non-homogeneous Poisson process with the profile as its intensity (seeded).
    Poisson,
}

/// Requests per second over time: straight lines between `points` (a step is two points at the
/// same instant), flat before the first and after the last, plus an optional daily swing.
#[derive(Debug, Clone, PartialEq)]
pub struct RateProfile {
    pub points: Vec<(f64, f64)>,
    /// `(amplitude_rps, period_s, phase_s)`: adds `amplitude × sin(2π (t + phase) / period)`.
    pub diurnal: Option<(f64, f64, f64)>,
}

impl RateProfile {
    pub fn constant(rps: f64) -> RateProfile {
        RateProfile {
            points: vec![(0.0, rps)],
            diurnal: None,
        }
    }

    pub fn rate_at(&self, t: f64) -> f64 {
        let base = match self.points.iter().position(|(at, _)| *at > t) {
            None => self.points.last().map_or(0.0, |p| p.1),
            Some(0) => self.points[0].1,
            Some(i) => {
                let (t0, r0) = self.points[i - 1];
                let (t1, r1) = self.points[i];
                r0 + (r1 - r0) * (t - t0) / (t1 - t0)
            }
        };
        let swing = self.diurnal.map_or(0.0, |(amp, period, phase)| {
            amp * (std::f64::consts::TAU * (t + phase) / period).sin()
        });
        (base + swing).max(0.0)
    }
}

/// Token counts: fixed, uniform in an inclusive range, or lognormal (heavy-tailed, as real
/// prompts and generations are: most short, a few very long).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tokens {
    Fixed(u32),
    Uniform(u32, u32),
    /// `median × e^(sigma·Z)` for a standard normal Z, rounded and clamped to `1..=max`.
    LogNormal {
        median: u32,
        sigma: f64,
        max: u32,
    },
}

impl Tokens {
    fn draw(self, rng: &mut fastrand::Rng) -> u32 {
        match self {
            Tokens::Fixed(n) => n,
            Tokens::Uniform(lo, hi) => rng.u32(lo..=hi),
            Tokens::LogNormal { median, sigma, max } => {
                // Box–Muller: fastrand has no normal distribution, two uniforms make one.
                let (u1, u2) = (1.0 - rng.f64(), rng.f64());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let x = (median as f64 * (sigma * z).exp()).round();
                x.clamp(1.0, max.max(1) as f64) as u32
            }
        }
    }

    /// The expected count (the clamp ignored): what sizes a replica's throughput.
    pub fn mean(self) -> f64 {
        match self {
            Tokens::Fixed(n) => n as f64,
            Tokens::Uniform(lo, hi) => (lo as f64 + hi as f64) / 2.0,
            Tokens::LogNormal { median, sigma, .. } => median as f64 * (sigma * sigma / 2.0).exp(),
        }
    }
}

/// One synthetic source of requests of one tier.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    pub tier: u8,
    /// The simulated pool the stream's requests arrive at.
    pub pool: u8,
    pub process: Process,
    pub rate: RateProfile,
    pub input_tokens: Tokens,
    pub output_tokens: Tokens,
}

/// Integration step for turning a rate into arrivals; arrivals are placed exactly inside it.
const GEN_STEP_S: f64 = 0.01;

/// Every arrival of `streams` in `[0, duration_s)`, in time order. The same seed gives the same
/// requests.
pub fn generate(streams: &[Stream], duration_s: f64, seed: u64) -> Vec<Request> {
    let mut out = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        // One generator per stream, so adding a stream does not reshuffle the others.
        let mut rng = fastrand::Rng::with_seed(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64);
        let next = |rng: &mut fastrand::Rng| match stream.process {
            Process::Uniform => 1.0,
            Process::Poisson => -(1.0 - rng.f64()).ln(),
        };
        let mut threshold = next(&mut rng);
        let mut acc = 0.0;
        let steps = (duration_s / GEN_STEP_S).ceil() as u64;
        for k in 0..steps {
            let t = k as f64 * GEN_STEP_S;
            let rate = stream.rate.rate_at(t + GEN_STEP_S / 2.0);
            let gained = rate * GEN_STEP_S;
            // Bounded: each pass emits one arrival and raises the threshold by a positive amount.
            while acc + gained >= threshold && rate > 0.0 {
                let at = t + (threshold - acc) / rate;
                if at >= duration_s {
                    break;
                }
                out.push(Request {
                    at_s: at,
                    input_tokens: stream.input_tokens.draw(&mut rng),
                    output_tokens: stream.output_tokens.draw(&mut rng),
                    tier: stream.tier,
                    pool: stream.pool,
                });
                threshold += next(&mut rng).max(1e-12);
            }
            acc += gained;
        }
    }
    out.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    out
}

/// Reads a trace: CSV `TIMESTAMP,ContextTokens,GeneratedTokens` (a header, then one request per
/// row; timestamps as `YYYY-MM-DD HH:MM:SS.fffffff` or seconds) or JSONL with `timestamp`,
/// `input_length`, `output_length`. Times are made relative to the first request. Every request
/// gets `tier`.
pub fn read_trace(path: &Path, tier: u8) -> Result<Vec<Request>, SimError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| SimError::Trace {
        file: file.clone(),
        message: format!("cannot read it ({e}); pass a CSV or JSONL trace file"),
    })?;
    let jsonl = path
        .extension()
        .is_some_and(|e| e == "jsonl" || e == "json")
        || text.trim_start().starts_with('{');
    if jsonl {
        parse_jsonl(&text, &file, tier)
    } else {
        parse_csv(&text, &file, tier)
    }
}

fn row_error(file: &str, line: usize, message: String) -> SimError {
    SimError::TraceRow {
        file: file.to_string(),
        line,
        message,
    }
}

/// Seconds since the epoch for a trace timestamp: a date-time or a plain number of seconds.
fn parse_time(s: &str) -> Option<f64> {
    let s = s.trim();
    if let Ok(x) = s.parse::<f64>() {
        return x.is_finite().then_some(x);
    }
    let dt = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f"))
        .ok()?;
    let utc = dt.and_utc();
    Some(utc.timestamp() as f64 + utc.timestamp_subsec_nanos() as f64 / 1e9)
}

fn parse_tokens(s: &str) -> Option<u32> {
    s.trim().parse::<u32>().ok()
}

/// The trace CSV's columns, in order (matched without regard to case or surrounding spaces).
const CSV_COLUMNS: [&str; 3] = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"];

/// Reads a CSV trace with the `csv` crate: quoted fields, CRLF line ends and a UTF-8 byte-order
/// mark (as spreadsheets write them) are read as plain ones; blank lines are skipped; a bad row
/// is named by its line and column.
pub fn parse_csv(text: &str, file: &str, tier: u8) -> Result<Vec<Request>, SimError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        // A row of the wrong width is reported below with its line, not as a csv error.
        .flexible(true)
        .from_reader(text.as_bytes());
    // Lines as an editor numbers them: the csv crate's own count (and its record offset) lags
    // behind CRLF line ends and skipped blank lines, so the record's first byte is found past
    // the line ends at its offset (a record never starts with one) and the newlines before it
    // are counted.
    let newlines = |from: usize, to: usize| {
        text.as_bytes()[from.min(text.len())..to.min(text.len())]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
    };
    let csv_error = |e: csv::Error| {
        let line = e
            .position()
            .map_or(0, |p| newlines(0, p.byte() as usize + 1) + 1);
        row_error(file, line, format!("not CSV ({e})"))
    };
    let (mut line, mut counted) = (1, 0);
    let mut line_of = |record: &csv::StringRecord| {
        let mut at = record.position().map_or(counted, |p| p.byte() as usize);
        while matches!(text.as_bytes().get(at), Some(b'\r' | b'\n')) {
            at += 1;
        }
        let at = at.max(counted);
        line += newlines(counted, at);
        counted = at;
        line
    };
    let mut record = csv::StringRecord::new();
    if !reader.read_record(&mut record).map_err(csv_error)? {
        return Err(SimError::Trace {
            file: file.to_string(),
            message: "empty; expected a header TIMESTAMP,ContextTokens,GeneratedTokens".into(),
        });
    }
    let header_line = line_of(&record);
    if record.len() != CSV_COLUMNS.len()
        || !record
            .iter()
            .zip(CSV_COLUMNS)
            .all(|(got, want)| got.trim().eq_ignore_ascii_case(want))
    {
        let header: Vec<&str> = record.iter().map(str::trim).collect();
        return Err(row_error(
            file,
            header_line,
            format!(
                "header {:?}; expected TIMESTAMP,ContextTokens,GeneratedTokens",
                header.join(",")
            ),
        ));
    }
    let mut rows = Vec::new();
    while reader.read_record(&mut record).map_err(csv_error)? {
        let n = line_of(&record);
        if record.len() == 1 && record[0].trim().is_empty() {
            continue;
        }
        if record.len() != 3 {
            return Err(row_error(
                file,
                n,
                format!(
                    "{} fields; expected 3 (timestamp, context tokens, generated tokens)",
                    record.len()
                ),
            ));
        }
        let at = parse_time(&record[0]).ok_or_else(|| {
            row_error(
                file,
                n,
                format!(
                    "timestamp {:?} is not YYYY-MM-DD HH:MM:SS.fff or seconds",
                    record[0].trim()
                ),
            )
        })?;
        let tokens = |i: usize| {
            parse_tokens(&record[i]).ok_or_else(|| {
                row_error(
                    file,
                    n,
                    format!(
                        "{} {:?} is not a whole number ≥ 0",
                        CSV_COLUMNS[i],
                        record[i].trim()
                    ),
                )
            })
        };
        rows.push((at, tokens(1)?, tokens(2)?));
    }
    finish(rows, file, tier)
}

pub fn parse_jsonl(text: &str, file: &str, tier: u8) -> Result<Vec<Request>, SimError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| row_error(file, n, format!("not a JSON object ({e})")))?;
        let at = match v.get("timestamp") {
            Some(serde_json::Value::Number(x)) => x.as_f64(),
            Some(serde_json::Value::String(s)) => parse_time(s),
            _ => None,
        }
        .ok_or_else(|| {
            row_error(
                file,
                n,
                "timestamp is missing or not seconds / a date-time".into(),
            )
        })?;
        let field = |name: &str| {
            v.get(name)
                .and_then(|x| x.as_u64())
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| {
                    row_error(
                        file,
                        n,
                        format!("{name} is missing or not a whole number ≥ 0"),
                    )
                })
        };
        rows.push((at, field("input_length")?, field("output_length")?));
    }
    finish(rows, file, tier)
}

fn finish(mut rows: Vec<(f64, u32, u32)>, file: &str, tier: u8) -> Result<Vec<Request>, SimError> {
    if rows.is_empty() {
        return Err(SimError::Trace {
            file: file.to_string(),
            message: "has no requests".into(),
        });
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let start = rows[0].0;
    Ok(rows
        .into_iter()
        .map(|(at, input_tokens, output_tokens)| Request {
            at_s: at - start,
            input_tokens,
            output_tokens,
            tier,
            // A trace is the first pool's traffic.
            pool: 0,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lognormal draw has the median it is given and a heavy right tail, within its cap.
    #[test]
    fn lognormal_tokens_have_their_median_and_a_tail() {
        let t = Tokens::LogNormal {
            median: 200,
            sigma: 1.0,
            max: 5000,
        };
        let mut rng = fastrand::Rng::with_seed(9);
        let mut xs: Vec<u32> = (0..20_000).map(|_| t.draw(&mut rng)).collect();
        xs.sort_unstable();
        let median = xs[xs.len() / 2];
        assert!((185..=215).contains(&median), "{median}");
        // e^(1.2816) ≈ 3.6: the 90th percentile is ~720 tokens, far above the median.
        let p90 = xs[xs.len() * 9 / 10];
        assert!((640..=800).contains(&p90), "{p90}");
        assert!(xs.iter().all(|&x| (1..=5000).contains(&x)));
        let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / xs.len() as f64;
        assert!(
            (mean / t.mean() - 1.0).abs() < 0.05,
            "{mean} vs {}",
            t.mean()
        );
    }

    #[test]
    fn uniform_arrivals_follow_the_integral() {
        let s = Stream {
            pool: 0,
            tier: 0,
            process: Process::Uniform,
            rate: RateProfile {
                points: vec![
                    (0.0, 20.0),
                    (10.0, 20.0),
                    (10.0, 32.0),
                    (40.0, 32.0),
                    (40.0, 20.0),
                ],
                diurnal: None,
            },
            input_tokens: Tokens::Fixed(0),
            output_tokens: Tokens::Fixed(100),
        };
        let r = generate(&[s], 50.0, 1);
        let in_burst = r.iter().filter(|q| q.at_s >= 10.0 && q.at_s < 40.0).count();
        assert!((959..=961).contains(&in_burst), "{in_burst}");
        // 10 s at 20, 30 s at 32, 10 s at 20.
        assert!((1359..=1361).contains(&r.len()), "{}", r.len());
    }

    #[test]
    fn poisson_is_seeded_and_near_its_rate() {
        let s = Stream {
            pool: 0,
            tier: 1,
            process: Process::Poisson,
            rate: RateProfile::constant(50.0),
            input_tokens: Tokens::Uniform(10, 20),
            output_tokens: Tokens::Fixed(5),
        };
        let a = generate(std::slice::from_ref(&s), 100.0, 7);
        let b = generate(std::slice::from_ref(&s), 100.0, 7);
        let c = generate(&[s], 100.0, 8);
        assert_eq!(a, b);
        assert_ne!(a, c);
        // 5000 expected, standard deviation ~71.
        assert!((4700..5300).contains(&a.len()), "{}", a.len());
        assert!(a.iter().all(|q| (10..=20).contains(&q.input_tokens)));
    }

    #[test]
    fn csv_bad_rows_name_their_line() {
        let ok = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.5,10,3\n";
        let r = parse_csv(ok, "t.csv", 0).unwrap();
        assert_eq!(r.len(), 2);
        assert!((r[1].at_s - 0.52004).abs() < 1e-6);
        let bad = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,4808,10\n2023-11-16 18:17:04.5,ten,3\n";
        let e = parse_csv(bad, "t.csv", 0).unwrap_err().to_string();
        assert!(e.starts_with("t.csv:3: ContextTokens \"ten\""), "{e}");
        let bad = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,4808\n";
        assert!(
            parse_csv(bad, "t.csv", 0)
                .unwrap_err()
                .to_string()
                .starts_with("t.csv:2: 2 fields")
        );
        let bad = "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n";
        assert!(
            parse_csv(bad, "t.csv", 0)
                .unwrap_err()
                .to_string()
                .starts_with("t.csv:2: timestamp")
        );
    }

    /// A trace saved by a spreadsheet: a byte-order mark, CRLF line ends, quoted fields, spaces
    /// around values; a bad row is named by its line (as an editor counts them) and column.
    #[test]
    fn csv_reads_quotes_a_bom_and_crlf_and_names_a_bad_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("excel.csv");
        std::fs::write(
            &path,
            "\u{feff}TIMESTAMP,ContextTokens,GeneratedTokens\r\n\"2023-11-16 18:17:03.5\",\"4808\",10\r\n2023-11-16 18:17:04.5, 10 ,\"3\"\r\n",
        )
        .unwrap();
        let r = read_trace(&path, 1).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].input_tokens, r[0].output_tokens, r[0].tier),
            (4808, 10, 1)
        );
        assert_eq!(
            (r[1].at_s, r[1].input_tokens, r[1].output_tokens),
            (1.0, 10, 3)
        );
        let bad = "\u{feff}TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:17:03.5,1,2\r\n\r\n\"2023-11-16 18:17:04.5\",1,\"two\"\r\n";
        let e = parse_csv(bad, "t.csv", 0).unwrap_err().to_string();
        assert!(e.starts_with("t.csv:4: GeneratedTokens \"two\""), "{e}");
        let bad = "TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n\"2, 3\",4\n";
        let e = parse_csv(bad, "t.csv", 0).unwrap_err().to_string();
        assert!(e.starts_with("t.csv:3: 2 fields"), "{e}");
    }

    #[test]
    fn jsonl_bad_rows_name_their_line() {
        let ok = "{\"timestamp\": 10.5, \"input_length\": 3, \"output_length\": 4}\n{\"timestamp\": 11, \"input_length\": 1, \"output_length\": 2}\n";
        let r = parse_jsonl(ok, "t.jsonl", 0).unwrap();
        assert_eq!(r[1].at_s, 0.5);
        let bad = "{\"timestamp\": 10.5, \"input_length\": 3, \"output_length\": 4}\n\n{\"timestamp\": 11, \"input_length\": -1, \"output_length\": 2}\n";
        let e = parse_jsonl(bad, "t.jsonl", 0).unwrap_err().to_string();
        assert!(e.starts_with("t.jsonl:3: input_length"), "{e}");
        let e = parse_jsonl("not json\n", "t.jsonl", 0)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.jsonl:1: not a JSON object"), "{e}");
    }
}
