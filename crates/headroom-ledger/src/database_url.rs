//! Database URLs as the binary is given them: the password kept out of every message, and
//! accepted apart from the URL (from a file or the environment), so that the URL itself may be
//! logged, templated or shown in a process list.

use crate::LedgerError;

/// Query parameters of a PostgreSQL URL that carry a secret.
const SECRET_PARAMS: [&str; 2] = ["password", "sslpassword"];

/// The URL as a message may show it: any password, in the user part or the query, replaced by
/// `***`. Text that does not parse as a URL is shown only up to its scheme.
pub fn redact(text: &str) -> String {
    let Ok(mut url) = url::Url::parse(text) else {
        let scheme = text.split("://").next().unwrap_or("");
        return format!("{scheme}://(unparseable URL)");
    };
    if url.password().is_some() {
        // Only fails for URLs that cannot have a password, which this one has.
        let _ = url.set_password(Some("***"));
    }
    if url.query_pairs().any(|(k, _)| is_secret(&k)) {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret(&k) {
                    "***".into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

fn is_secret(key: &str) -> bool {
    SECRET_PARAMS.iter().any(|s| key.eq_ignore_ascii_case(s))
}

/// `url` with `password` set for its user. A URL that carries a password already is refused
/// (two sources for one secret would leave it unclear which one is in force).
pub fn with_password(text: &str, password: &str) -> Result<String, LedgerError> {
    let bad = |why: &str| LedgerError::BadUrl(format!("{}: {why}", redact(text)));
    let mut url = url::Url::parse(text).map_err(|_| bad("not a URL"))?;
    if url.password().is_some() || url.query_pairs().any(|(k, _)| k == "password") {
        return Err(bad(
            "carries a password already; give the password once, in the URL or apart from it",
        ));
    }
    if url.username().is_empty() {
        return Err(bad(
            "names no user for the password; write postgres://USER@HOST/DB",
        ));
    }
    url.set_password(Some(password))
        .map_err(|()| bad("cannot carry a password"))?;
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        for (url, shown) in [
            (
                "postgres://runtime:s3cr%40t@db:5432/headroom",
                "postgres://runtime:***@db:5432/headroom",
            ),
            (
                "postgres://runtime@db/headroom?password=s3cret&sslmode=require",
                "postgres://runtime@db/headroom?password=***&sslmode=require",
            ),
            ("postgres://db/headroom", "postgres://db/headroom"),
            ("sqlite:///tmp/ledger.db", "sqlite:///tmp/ledger.db"),
            ("postgres://u:p@[bad", "postgres://(unparseable URL)"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn a_password_apart_from_the_url_joins_it_once() {
        let url = with_password("postgres://runtime@db:5432/headroom", "p@ss:word/").unwrap();
        // Reserved characters are escaped, so the user, host and database read back unchanged.
        let parsed = url::Url::parse(&url).unwrap();
        assert_eq!(
            (parsed.username(), parsed.host_str(), parsed.path()),
            ("runtime", Some("db"), "/headroom")
        );
        assert!(parsed.password().is_some_and(|p| p.starts_with("p%40ss")));
        assert_eq!(redact(&url), "postgres://runtime:***@db:5432/headroom");
        let twice = with_password("postgres://runtime:old@db/headroom", "new").unwrap_err();
        assert!(
            twice.to_string().contains("carries a password already"),
            "{twice}"
        );
        assert!(!twice.to_string().contains("old"), "{twice}");
        assert!(with_password("postgres://db/headroom", "p").is_err());
    }
}
