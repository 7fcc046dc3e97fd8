-- API tokens: only a SHA-256 of each secret is kept. Revocations are rows of their own.
CREATE TABLE api_tokens (
    id            TEXT PRIMARY KEY NOT NULL,
    secret_sha256 TEXT NOT NULL,
    accounts      TEXT NOT NULL,
    scopes        TEXT NOT NULL,
    created_ms    INTEGER NOT NULL
);
CREATE TABLE api_token_revocations (
    token_id TEXT PRIMARY KEY NOT NULL REFERENCES api_tokens (id),
    at_ms    INTEGER NOT NULL
);
CREATE TRIGGER api_tokens_append_only_u BEFORE UPDATE ON api_tokens
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER api_tokens_append_only_d BEFORE DELETE ON api_tokens
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
