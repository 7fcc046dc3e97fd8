//! `headroom migrate`: create or upgrade the ledger's schema, as the role that owns it, and
//! grant the role `serve` runs as what it needs and nothing more.

use std::process::ExitCode;

use anyhow::Context;
use headroom_ledger::{LedgerError, PostgresLedger, RuntimeRole};

use crate::BadInput;

/// Where `migrate` reads the runtime role's password (an environment variable, not a flag, so it
/// is not in the process list or the shell history).
pub const RUNTIME_PASSWORD_ENV: &str = "HEADROOM_RUNTIME_PASSWORD";

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// sqlite://PATH or postgres://OWNER@HOST:PORT/DB (PostgreSQL: the role that owns the tables)
    #[arg(long, value_name = "URL", env = "HEADROOM_DATABASE_URL")]
    database_url: String,
    /// PostgreSQL: the role `serve` runs as. After migrating it holds CONNECT, schema USAGE,
    /// SELECT and INSERT on every ledger table, DELETE on `controller_memory`, `decisions` and
    /// `alert_book` (pruned to a retention; their triggers refuse what it keeps) and USAGE on their
    /// sequences, nothing else (privileges granted by hand are revoked). Created with LOGIN if it does not exist and
    /// HEADROOM_RUNTIME_PASSWORD is set, which also sets its password. Refused if the role is a
    /// superuser or owns (or is a member of the owner of) a table. Run it again after each upgrade.
    #[arg(long, value_name = "ROLE")]
    runtime_role: Option<String>,
}

pub async fn run(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let url = args.database_url.as_str();
    let postgres = url.starts_with("postgres:") || url.starts_with("postgresql:");
    if !postgres {
        if args.runtime_role.is_some() && url.starts_with("sqlite:") {
            return Err(BadInput(
                "--runtime-role: only a PostgreSQL ledger has roles; drop it for sqlite://, or pass a postgres:// --database-url".into(),
            )
            .into());
        }
        crate::open_ledger(url).await?;
        println!("ledger migrated");
        return Ok(ExitCode::SUCCESS);
    }
    let password = std::env::var(RUNTIME_PASSWORD_ENV).ok();
    let runtime = match args.runtime_role.as_deref() {
        Some(role) => {
            check_role_name(role)?;
            if let Some(p) = &password {
                check_password(p)?;
            }
            Some(RuntimeRole {
                name: role,
                password: password.as_deref(),
            })
        }
        None => None,
    };
    match PostgresLedger::migrate(url, runtime).await {
        Ok(_) => {
            match runtime {
                Some(r) => println!(
                    "ledger migrated; role {} may SELECT and INSERT on the ledger tables (and DELETE the engine's memory past its retention), nothing else",
                    r.name
                ),
                None => println!("ledger migrated"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ LedgerError::RuntimeRole { .. }) => Err(BadInput(e.to_string()).into()),
        Err(e) => Err(e).context("migrating the PostgreSQL ledger"),
    }
}

/// A role name PostgreSQL takes unquoted, as a URL's user would be typed.
fn check_role_name(role: &str) -> Result<(), BadInput> {
    let mut chars = role.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && role.len() <= 63 {
        return Ok(());
    }
    Err(BadInput(format!(
        "--runtime-role: {:?} is not a plain role name; use lower-case letters, digits and _ (at most 63, not starting with a digit)",
        role.chars().take(70).collect::<String>()
    )))
}

/// Printable ASCII, so the SCRAM verifier is the one the server computes at login (SASLprep is
/// the identity on it).
fn check_password(password: &str) -> Result<(), BadInput> {
    if !password.is_empty() && password.bytes().all(|b| b.is_ascii_graphic()) {
        return Ok(());
    }
    Err(BadInput(format!(
        "{RUNTIME_PASSWORD_ENV}: use a non-empty password of printable ASCII without spaces, or unset it to keep the role's password"
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn role_names_are_plain_identifiers() {
        for ok in ["headroom_runtime", "_r", "r2"] {
            assert!(super::check_role_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "2r", "Runtime", "r-1", "r;drop", &"r".repeat(64)] {
            let err = super::check_role_name(bad).unwrap_err();
            assert!(err.0.starts_with("--runtime-role: "), "{bad}: {}", err.0);
        }
    }
}
