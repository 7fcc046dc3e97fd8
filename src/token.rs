//! `headroom token`: API tokens, bound to accounts and scopes, stored hashed.

use std::process::ExitCode;

use clap::Subcommand;
use headroom_api::auth::{Scope, new_token};
use headroom_cloud::{Clock, SystemClock};
use headroom_core::AccountName;

use crate::BadInput;

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; it is printed once and only its hash is kept.
    Create {
        #[arg(long, value_name = "URL", env = "HEADROOM_DATABASE_URL")]
        database_url: String,
        /// An account the token acts for (repeatable); `*` for every account.
        #[arg(long = "account", required = true)]
        accounts: Vec<String>,
        /// capacity, reports, budgets, signals, metrics or admin (repeatable).
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
    },
    /// List tokens (ids, accounts, scopes; never secrets).
    List {
        #[arg(long, value_name = "URL", env = "HEADROOM_DATABASE_URL")]
        database_url: String,
    },
    /// Revoke a token by id: writes with it are refused at once; reads within
    /// api.token_recheck_interval (a running serve's cache).
    Revoke {
        #[arg(long, value_name = "URL", env = "HEADROOM_DATABASE_URL")]
        database_url: String,
        id: String,
    },
}

pub async fn run(command: TokenCommand) -> anyhow::Result<ExitCode> {
    let now = SystemClock::new().now();
    match command {
        TokenCommand::Create {
            database_url,
            accounts,
            scopes,
        } => {
            for account in &accounts {
                if account != "*" {
                    account
                        .parse::<AccountName>()
                        .map_err(|e| BadInput(format!("--account: {e}")))?;
                }
            }
            let scopes: Vec<Scope> = scopes
                .iter()
                .map(|s| s.parse().map_err(|e| BadInput(format!("--scope: {e}"))))
                .collect::<Result<_, _>>()?;
            // A token may be made before `serve` first runs: this creates the ledger if needed.
            let ledger = crate::open_ledger(&database_url).await?;
            let (text, record) = new_token(&accounts, &scopes, now);
            ledger.create_token(&record).await?;
            println!("{text}");
            eprintln!(
                "token {} created; this is the only time it is shown",
                record.id
            );
        }
        TokenCommand::List { database_url } => {
            let ledger = crate::open_existing_ledger(&database_url).await?;
            for t in ledger.tokens().await? {
                let state = match t.revoked_at {
                    Some(at) => format!("revoked {}", at.to_rfc3339()),
                    None => "active".to_string(),
                };
                println!(
                    "{}\taccounts={}\tscopes={}\t{state}",
                    t.id,
                    t.accounts.join(","),
                    t.scopes.join(",")
                );
            }
        }
        TokenCommand::Revoke { database_url, id } => {
            let ledger = crate::open_existing_ledger(&database_url).await?;
            if !ledger.revoke_token(&id, now).await? {
                return Err(
                    BadInput(format!("no token {id:?}; `headroom token list` shows them")).into(),
                );
            }
            println!(
                "token {id} revoked: writes with it are refused at once, reads within api.token_recheck_interval"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
