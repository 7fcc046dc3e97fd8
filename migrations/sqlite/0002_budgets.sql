-- Budgets as append-only versions: the latest row per account is in force; earlier rows are the
-- audit trail of who could spend how much, when. Only US dollars for now.
CREATE TABLE budget_versions (
    seq                    INTEGER PRIMARY KEY AUTOINCREMENT,
    account                TEXT NOT NULL,
    period                 TEXT NOT NULL CHECK (period IN ('hour', 'day', 'month')),
    ceiling_micros         INTEGER NOT NULL CHECK (ceiling_micros > 0),
    currency               TEXT NOT NULL DEFAULT 'USD' CHECK (currency = 'USD'),
    soft_threshold_percent INTEGER NOT NULL CHECK (soft_threshold_percent BETWEEN 1 AND 100),
    hard_action            TEXT NOT NULL CHECK (hard_action IN ('refuse', 'clamp', 'shed-lowest-tier')),
    at_ms                  INTEGER NOT NULL
);
CREATE INDEX budget_versions_by_account ON budget_versions (account, seq);
CREATE INDEX node_events_by_account ON node_events (account, seq);

CREATE TRIGGER budget_versions_append_only_u BEFORE UPDATE ON budget_versions
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER budget_versions_append_only_d BEFORE DELETE ON budget_versions
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
