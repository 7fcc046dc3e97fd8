//! The CLI's messages for common mistakes: one line on stderr naming the flag or key and the
//! fix, exit code 2 for bad input.

use std::process::Command;

use super::{BIN, free_port};

/// Runs `headroom ARGS` and returns its exit code and stderr, which must be one line.
fn one_line_error(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    (out.status.code(), stderr)
}

/// A duration flag given a malformed value is one line naming the flag and the form it takes,
/// told apart from a well-formed value out of range.
#[test]
fn a_malformed_duration_is_one_line_naming_the_flag_and_the_form() {
    let (code, stderr) = one_line_error(&["demo", "--seconds", "soon"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --seconds: \"soon\" is not a whole number of seconds")
            && stderr.contains("30s"),
        "{stderr}"
    );
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/headroom.example.toml");
    let replay = |step: &str| {
        one_line_error(&[
            "replay",
            "--config",
            config,
            "--from",
            "2026-12-01T09:00:00Z",
            "--to",
            "2026-12-01T10:00:00Z",
            "--step",
            step,
        ])
    };
    let (code, stderr) = replay("5x");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --step: \"5x\" is not a duration;")
            && stderr.contains("e.g. 15s")
            && !stderr.contains("outside"),
        "{stderr}"
    );
    let (code, stderr) = replay("2h");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --step: \"2h\" is outside 1s to 1h"),
        "{stderr}"
    );
}

/// `--listen localhost` says a port is needed and shows one; a name with a port resolves.
#[test]
fn a_listen_address_without_a_port_says_a_port_is_needed() {
    for command in [&["serve"][..], &["demo"][..]] {
        let args: Vec<&str> = command
            .iter()
            .copied()
            .chain(["--listen", "localhost"])
            .collect();
        let (code, stderr) = one_line_error(&args);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.starts_with("error: --listen: \"localhost\" needs a port")
                && stderr.contains("localhost:8080"),
            "{stderr}"
        );
    }
    let (code, stderr) = one_line_error(&["serve", "--listen", "localhost:99999"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--listen") && stderr.contains("port"),
        "{stderr}"
    );
}

/// A PostgreSQL server that is not there: the cause (connection refused) and where, never the
/// password, and not the pool's "timed out".
#[test]
fn an_unreachable_postgres_says_connection_refused_and_where() {
    let port = free_port();
    let url = format!("postgres://headroom:s3cret-pw@127.0.0.1:{port}/headroom");
    for args in [
        vec!["report", "budget", "--database-url", url.as_str()],
        vec!["token", "list", "--database-url", url.as_str()],
    ] {
        let (code, stderr) = one_line_error(&args);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr.to_lowercase().contains("connection refused"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
        assert!(!stderr.contains("s3cret-pw"), "{stderr}");
        assert!(!stderr.contains("timed out"), "{stderr}");
        assert_eq!(stderr.matches("efused").count(), 1, "said once: {stderr}");
    }
}

/// The demo takes `--database-url` as every other command does (`--database` stays, unlisted,
/// for scripts that use it); a PostgreSQL URL is refused in one line.
#[test]
fn demo_takes_database_url_as_every_other_command() {
    let help = Command::new(BIN).args(["demo", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("--database-url <URL>"), "{help}");
    assert!(!help.contains("--database <"), "{help}");
    let (code, stderr) = one_line_error(&[
        "demo",
        "--database-url",
        "postgres://headroom@127.0.0.1:5432/headroom",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --database-url:") && stderr.contains("sqlite://"),
        "{stderr}"
    );
}
