-- The controller's decisions, one row per distinct decision (repeats folded into it), so a team
-- can audit or compare them (shadow mode) after any restart.
CREATE TABLE decisions (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    pool   TEXT NOT NULL,
    at_ms  INTEGER NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX decisions_by_pool ON decisions (pool, seq);
CREATE TRIGGER decisions_append_only_u BEFORE UPDATE ON decisions
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER decisions_append_only_d BEFORE DELETE ON decisions
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
