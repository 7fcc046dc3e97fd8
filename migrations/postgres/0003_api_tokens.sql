-- API tokens: only a SHA-256 of each secret is kept. Revocations are rows of their own.
CREATE TABLE api_tokens (
    id            TEXT PRIMARY KEY,
    secret_sha256 TEXT NOT NULL,
    accounts      TEXT NOT NULL,
    scopes        TEXT NOT NULL,
    created       TIMESTAMPTZ NOT NULL
);
CREATE TABLE api_token_revocations (
    token_id TEXT PRIMARY KEY REFERENCES api_tokens (id),
    at       TIMESTAMPTZ NOT NULL
);
CREATE TRIGGER api_tokens_append_only BEFORE UPDATE OR DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
