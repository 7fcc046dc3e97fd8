-- Per-account running totals for budget admissions; see the PostgreSQL migration 0006.
CREATE TABLE standing_checkpoints (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    account         TEXT NOT NULL,
    period          TEXT NOT NULL CHECK (period IN ('hour', 'day', 'month')),
    period_start_ms INTEGER NOT NULL,
    settled_micros  INTEGER NOT NULL CHECK (settled_micros >= 0),
    open_nodes      TEXT NOT NULL,
    at_ms           INTEGER NOT NULL
);
CREATE INDEX standing_checkpoints_by_account ON standing_checkpoints (account, seq);
CREATE TRIGGER standing_checkpoints_append_only_u BEFORE UPDATE ON standing_checkpoints
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER standing_checkpoints_append_only_d BEFORE DELETE ON standing_checkpoints
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
